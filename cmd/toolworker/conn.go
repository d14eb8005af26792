package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/pkg/natsjs"
)

// loadContext reads --context; its server is used unless --nats or
// NATS_URL gives one.
func (o *options) loadContext(fs *flag.FlagSet, getenv func(string) string) error {
	if o.context == "" {
		return nil
	}
	nctx, err := natsjs.LoadContext(o.context, getenv)
	if err != nil {
		return fmt.Errorf("--context: %w", err)
	}
	o.nctx = &nctx
	explicit := getenv("NATS_URL") != ""
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "nats" })
	if !explicit && nctx.URL != "" {
		o.natsURL = nctx.URL
	}
	return nil
}

// connectOptions returns the credentials of --creds, --nkey and --context
// (a user and password in --nats work too), and --inbox-prefix.
func (o *options) connectOptions() natsjs.ConnectOptions {
	return natsjs.ConnectOptions{Creds: o.creds, Nkey: o.nkey, Context: o.nctx, InboxPrefix: o.inbox}
}

// credentialFiles are the files the built-in file tools must never read:
// the worker's own credentials.
func credentialFiles(o *options) []string {
	files := []string{o.creds, o.nkey}
	if o.nctx != nil {
		files = append(files, o.nctx.Creds, o.nctx.Nkey)
	}
	var out []string
	for _, f := range files {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// serverAddrs returns the addresses of the NATS servers in urls (host names
// resolved, briefly), which http_fetch never reaches.
func serverAddrs(urls string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, raw := range strings.Split(urls, ",") {
		raw = strings.TrimSpace(raw)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		port := 4222
		if p := u.Port(); p != "" {
			if port, err = strconv.Atoi(p); err != nil {
				continue
			}
		}
		ips := []netip.Addr{}
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
			ips = append(ips, ip)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			found, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
			cancel()
			ips = append(ips, found...)
		}
		for _, ip := range ips {
			out = append(out, netip.AddrPortFrom(ip, uint16(port)))
		}
	}
	return out
}
