package convstore

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/offload-dev/offload/pkg/natsjs/internal/direct"
)

// storedOn reports whether stream holds a message on subject: a direct
// get of the subject's last message (the subject form of the API, which
// needs neither the stream's info nor a consumer, and is granted to the
// people roles for their subjects alone).
func storedOn(ctx context.Context, nc *nats.Conn, stream, subject string) (bool, error) {
	m, err := direct.Last(ctx, nc, stream, subject)
	return m != nil, err
}
