package main

import (
	"github.com/offload-dev/offload/pkg/natsjs/serve/notify"
)

// parseReceivers parses the values of --notify.
func parseReceivers(values []string) ([]notify.Receiver, error) {
	var out []notify.Receiver
	for _, v := range values {
		r, err := notify.ParseReceiver(v)
		if err != nil {
			return nil, usageErr("--notify %q: %v", v, err)
		}
		out = append(out, r)
	}
	return out, nil
}
