// Package authconf is the one definition of the NATS permissions of
// offload's roles (SPEC §9), and renders from it the authorization block of
// a nats-server configuration: deploy/nats/auth.conf is [Shipped] rendered,
// the deployment tests measure every role of that file against a real
// server, and `toolworker --print-auth USER` prints the entry of a worker
// user serving one's own tools from the same definition.
//
// A worker user reaches only its tools: for each tool T it may pull, bind,
// create (with the filtered create API) and acknowledge the deliveries of
// its own task consumer task_T, publish results and progress on subjects
// ending with T, read the cancels of T (subscription and direct get), and
// write the registry keys T.<worker-id>. No grant covers a whole stream's
// messages.
package authconf
