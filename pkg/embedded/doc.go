// Package embedded runs the agent's default NATS server (SPEC §6.4): an
// in-process nats-server with JetStream storing under the agent's store
// directory, listening on 127.0.0.1 on a free port, whose URL is published
// in <store>/nats.url so that a second process on the same store connects to
// it instead of starting another server.
package embedded
