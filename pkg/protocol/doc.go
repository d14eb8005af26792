// Package protocol is the JetStream wire contract of offload (SPEC §5) in
// plain Go: the payloads exchanged between agents, workers and people
// ([Task], [Result], [Approval], [Decision], [Cancel], [Progress]), the
// subjects they travel on ([Subjects]), task and conversation IDs (ULIDs,
// [NewID], [ParseID]), strict decoders ([DecodeTask], [DecodeResult], …) and
// the conversion between a [Result] and a tool's outcome
// ([ResultFromOutcome], [Result.Outcome]).
//
// The package imports no NATS client: the adapter natsjs moves these values
// over JetStream; everything here can be used and tested without a server.
//
// # Decoding
//
// Every payload that arrives from the network is decoded with the matching
// DecodeXxx function. Decoders refuse payloads larger than a maximum size
// ([DefaultMaxSize] unless [DecodeOpts.MaxSize] says otherwise), check
// required fields and IDs, apply the contract's defaults (a result's task_id
// is the subject's, created_at is the time received, status is ok, mode is
// inline) and ignore unknown fields. Every refusal is a [*DecodeError] that
// wraps one of [ErrTooLarge], [ErrMalformed], [ErrMissingField] or
// [ErrInvalidField].
package protocol
