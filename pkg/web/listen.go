package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/net/netutil"
)

// CheckAddr refuses an HTTP address beyond loopback when no tokens file
// is given: nothing is served beyond this host with only a generated
// token nobody else was given.
func CheckAddr(addr string, tokensGiven bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); !tokensGiven && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s is not a loopback address: give a tokens file", addr)
	}
	return nil
}

// LoadTokens reads the tokens file, or, when file is "", returns the
// admin token kept in storeDir (generated on first use, see
// [AdminToken]) as the only token, named "admin", with the token itself.
func LoadTokens(file, storeDir string) (Tokens, string, error) {
	if file == "" {
		tok, err := AdminToken(storeDir)
		if err != nil {
			return nil, "", err
		}
		return Tokens{tok: {Roles: []Role{RoleAdmin}, Name: "admin"}}, tok, nil
	}
	f, err := os.Open(filepath.Clean(file))
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	t, err := ParseTokens(f)
	return t, "", err
}

// ListenAndServe serves h on addr until ctx ends or stop is closed, then
// calls shutdown (the core's Stop: its live runs suspend and are handed
// over) and shuts the HTTP server down, both within closeTimeout.
// listening is told the address once it listens. The server has the
// timeouts and the header bound of lim, and holds at most
// lim.MaxConnections connections open (further ones wait in the listen
// backlog): a slow or idle client is cut within them (the route wrapper,
// [Handler], lifts the read deadline once a request is read, and keeps
// the write deadline ahead of each write).
func ListenAndServe(ctx context.Context, stop <-chan struct{}, addr string, h http.Handler, lim Limits, shutdown func(context.Context) error, closeTimeout time.Duration, listening func(net.Addr)) error {
	lim = lim.orDefaults()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout, WriteTimeout: lim.WriteTimeout,
		IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeaderBytes}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(netutil.LimitListener(ln, lim.MaxConnections)) }()
	if listening != nil {
		listening(ln.Addr())
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case <-stop:
	case serveErr = <-served:
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	closeErr := shutdown(cctx)
	if err := srv.Shutdown(cctx); err != nil {
		_ = srv.Close()
	}
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, closeErr)
}

// PublicURL is the base URL people reach the service at (the links of
// its notifications start with it): given, when set (an http(s) URL), else
// http:// and addr, the address of the HTTP face (this host's name for an
// address on every interface).
func PublicURL(given, addr string) (string, error) {
	if given != "" {
		if u, err := url.Parse(given); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("%q: want an http(s) URL", given)
		}
		return given, nil
	}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			if name, err := os.Hostname(); err == nil {
				host = name
			}
		}
		addr = net.JoinHostPort(host, port)
	}
	return "http://" + addr, nil
}
