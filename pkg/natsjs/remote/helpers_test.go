package remote_test

import (
	"context"
	"testing"

	"github.com/offload-dev/offload/pkg/natsjs/internal/jstest"
	"github.com/offload-dev/offload/pkg/natsjs/natstest"
	"github.com/offload-dev/offload/pkg/natsjs/remote"
)

// wait bounds every wait on a signal in these tests.
const wait = jstest.Wait

// startClient starts a client on its own connection, stopped at the end of
// the test.
func startClient(t *testing.T, srv *natstest.Server, cfg remote.ClientConfig) *remote.Client {
	t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = srv.Conn(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = jstest.Logger().With("test", t.Name())
	}
	c, err := remote.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop client: %v", err)
		}
	})
	return c
}
