// Package embedded runs the agent's default NATS server (SPEC §6.4): an
// in-process nats-server with JetStream storing under the agent's store
// directory, listening on 127.0.0.1 on a free port, whose URL is published
// in <store>/nats.url so that a second process on the same store connects to
// it instead of starting another server.
//
// The server is authenticated: it accepts only the store's user, an nkey
// whose seed is generated on first use in <store>/nats.nk (mode 0600, in a
// store of mode 0700), so no secret crosses the wire and other local
// processes without the seed are refused. The server's ID is recorded in
// <store>/nats.server-id and checked before a second process shares it and
// after it connects, so that a foreign listener on a stale URL is never
// taken for the store's server.
package embedded
