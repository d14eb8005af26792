package natsjs

import "errors"

// The sentinel errors of natsjs and its packages (worker, remote,
// convstore), all here so that a caller finds what it may branch on in one
// place. Each is wrapped by the errors that carry details: match them with
// errors.Is.
var (
	// ErrInvalidConfig is wrapped by errors about an unusable
	// configuration of a worker, a dispatcher, a toolset, a client, a
	// conversation store or an inbox.
	ErrInvalidConfig = errors.New("natsjs: invalid config")
	// ErrStarted is returned by Start when called twice (or after Stop).
	ErrStarted = errors.New("natsjs: already started")
	// ErrStopped is returned by calls on a stopped (or never started)
	// worker, dispatcher or toolset.
	ErrStopped = errors.New("natsjs: stopped")

	// ErrInvalidDefinition is wrapped by errors about a definition file
	// that does not parse or does not follow the naming rules.
	ErrInvalidDefinition = errors.New("natsjs: invalid definition")
	// ErrIncompatibleStream is wrapped by an [*IncompatibleError] about a
	// stream.
	ErrIncompatibleStream = errors.New("natsjs: existing stream has an incompatible configuration")
	// ErrIncompatibleConsumer is wrapped by an [*IncompatibleError] about
	// a consumer.
	ErrIncompatibleConsumer = errors.New("natsjs: existing consumer has an incompatible configuration")

	// ErrNotPermitted is wrapped by the errors about an operation the
	// connection's user may not do (a [*PermissionError]), such as
	// creating a missing stream or consumer.
	ErrNotPermitted = errors.New("natsjs: not permitted")
	// ErrWrongServer is wrapped by the error of [Connect] when the server
	// reached is not the one ConnectOptions.ExpectServerID names.
	ErrWrongServer = errors.New("natsjs: connected to an unexpected server")
	// ErrNoContext is wrapped by the error of [LoadContext] for a context
	// that does not exist.
	ErrNoContext = errors.New("natsjs: no such nats context")

	// ErrInvalidTask is wrapped by errors about a task that cannot be
	// dispatched.
	ErrInvalidTask = errors.New("natsjs: invalid task")
	// ErrServerLost is wrapped by the error of calls that were waiting
	// when the connection to the server was closed or stayed away for the
	// dispatcher's ServerLostAfter.
	ErrServerLost = errors.New("natsjs: lost the NATS server")
	// ErrDetached is the error of a dispatcher's handle that was
	// detached: the task runs on, but the handle no longer reports its
	// result.
	ErrDetached = errors.New("natsjs: task detached")
	// ErrPending is returned by a handle's Result before the result is
	// known.
	ErrPending = errors.New("natsjs: result not known yet")
	// ErrAlreadyAnswered is wrapped by the error of a decision or an
	// answer published first-wins when one is already stored for the
	// task (convstore.Publisher.PublishFirst).
	ErrAlreadyAnswered = errors.New("natsjs: the task already has a decision or an answer")
	// ErrNotRemote is returned when an executor without a fallback is
	// asked to start a call of a tool that no worker serves.
	ErrNotRemote = errors.New("natsjs: no worker serves this tool")
)
