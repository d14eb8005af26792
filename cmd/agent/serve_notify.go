package main

import (
	"net"
	"net/url"
	"os"

	"github.com/offload-dev/offload/pkg/natsjs/serve"
)

// parseReceivers parses the values of --notify.
func parseReceivers(values []string) ([]serve.Receiver, error) {
	var out []serve.Receiver
	for _, v := range values {
		r, err := serve.ParseReceiver(v)
		if err != nil {
			return nil, usageErr("--notify %q: %v", v, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// publicURL is the base URL of the notifications' links: --public-url, or
// http:// and the address of --http (this host's name for an address on
// every interface).
func publicURL(sf *serveFlags) string {
	if sf.publicURL != "" {
		return sf.publicURL // checked by checkPublicURL
	}
	host, port, err := net.SplitHostPort(sf.addr)
	if err != nil {
		return "http://" + sf.addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil {
			host = name
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// checkPublicURL checks --public-url: empty, or an http(s) URL.
func checkPublicURL(s string) error {
	if s == "" {
		return nil
	}
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErr("--public-url %q: want an http(s) URL", s)
	}
	return nil
}
