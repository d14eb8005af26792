package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// credentialFiles are the files the built-in file tools must never read:
// the worker's own credentials.
func credentialFiles(o *options) []string {
	files := []string{o.conn.Creds, o.conn.Nkey}
	if c := o.copts.Context; c != nil {
		files = append(files, c.Creds, c.Nkey)
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

// longFlags lets the flags be given with one dash too, as Go's flag package
// took them (-nats URL, -tools=a,b): an argument -name or -name=value whose
// name is a flag of fl longer than a letter becomes --name. "--" ends the
// flags.
func longFlags(args []string, fl *pflag.FlagSet) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if len(name) > 1 && fl.Lookup(name) != nil {
			out[i] = "-" + a
		}
	}
	return out
}

// unknownShorthand matches pflag's error for an unknown shorthand flag.
var unknownShorthand = regexp.MustCompile(`^unknown shorthand flag: '.' in (-\S+)$`)

// flagError words a flag error as Go's flag package did: an unknown flag
// is "flag provided but not defined: -name".
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: "); ok {
		return fmt.Errorf("flag provided but not defined: %s", name)
	}
	if m := unknownShorthand.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("flag provided but not defined: %s", m[1])
	}
	return err
}
