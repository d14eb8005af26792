package builtin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// AddrPolicy decides whether http_fetch may connect to an address. It is
// consulted at dial time with the IP and port actually dialled, for every
// connection a fetch makes (redirects included, whatever the URL's host
// resolved to).
type AddrPolicy func(netip.AddrPort) bool

// Lookup resolves a host name to its addresses, as net.Resolver.LookupNetIP
// does.
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

// ErrAddrNotAllowed is wrapped by the dial error of a connection that the
// address policy refused. The model sees only "address not allowed".
var ErrAddrNotAllowed = errors.New("address not allowed")

var (
	cgnat     = netip.MustParsePrefix("100.64.0.0/10")
	thisNet   = netip.MustParsePrefix("0.0.0.0/8")
	reserved4 = netip.MustParsePrefix("240.0.0.0/4") // with 255.255.255.255
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
)

// PublicAddr reports whether ip is a public unicast address: not loopback,
// private (10/8, 172.16/12, 192.168/16), unique-local (fc00::/7),
// link-local (169.254/16, fe80::/10, cloud metadata included), CGNAT
// (100.64/10), multicast, unspecified, "this network" (0/8) or reserved
// (240/4, broadcast). IPv4 addresses written as IPv6 (::ffff:a.b.c.d, and
// the NAT64 prefix 64:ff9b::/96) are judged by their IPv4 address.
func PublicAddr(ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	ip = ip.Unmap()
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:16]))
	}
	switch {
	case ip.IsLoopback(), ip.IsPrivate(), ip.IsLinkLocalUnicast(), ip.IsMulticast(),
		ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast(), ip.IsUnspecified():
		return false
	case ip.Is4() && (cgnat.Contains(ip) || thisNet.Contains(ip) || reserved4.Contains(ip)):
		return false
	}
	return true
}

// PublicOnly is the default [AddrPolicy]: only [PublicAddr] addresses.
func PublicOnly(ap netip.AddrPort) bool { return PublicAddr(ap.Addr()) }

// AnyAddr is the [AddrPolicy] of --allow-private-network: every address.
func AnyAddr(netip.AddrPort) bool { return true }

// denied reports whether ap is one of deny, or has the port of one and is
// an address of this host: a loopback or unspecified address, or one of
// localAddrs (the host's interface addresses). A server on this host that
// listens on every interface (or on one the tool can name) is reached
// through any of them: 127.0.0.2, ::1, 0.0.0.0, the host's LAN or bridge
// address, and every name resolving to one. The port is refused on all.
func denied(ap netip.AddrPort, deny []netip.AddrPort, localAddrs func() []netip.Addr) bool {
	ip := ap.Addr().Unmap()
	portDenied := false
	for _, d := range deny {
		if d.Port() != ap.Port() {
			continue
		}
		if d.Addr().Unmap() == ip {
			return true
		}
		portDenied = true
	}
	if !portDenied {
		return false
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	for _, a := range localAddrs() {
		if a.Unmap() == ip {
			return true
		}
	}
	return false
}

// hostAddrs returns the addresses of this host's interfaces (none when
// they cannot be read; loopback and unspecified addresses are local
// anyway).
func hostAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, pfx.Addr())
		}
	}
	return out
}

// guardedDialer dials only addresses its policy allows: the host is
// resolved with lookup, and every address is checked again in the dialer's
// Control function, just before connect(2).
type guardedDialer struct {
	allow  AddrPolicy
	deny   []netip.AddrPort
	lookup Lookup
	dialer net.Dialer
}

func newGuardedDialer(allow AddrPolicy, deny []netip.AddrPort, lookup Lookup) *guardedDialer {
	g := &guardedDialer{allow: allow, deny: deny, lookup: lookup}
	g.dialer.Control = g.control
	return g
}

// control runs for each connection attempt with the numeric address.
func (g *guardedDialer) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrAddrNotAllowed, address)
	}
	if denied(ap, g.deny, hostAddrs) || !g.allow(ap) {
		return fmt.Errorf("%w: %s", ErrAddrNotAllowed, address)
	}
	return nil
}

// DialContext resolves addr's host with the injected lookup and dials its
// addresses in turn; each is checked by control.
func (g *guardedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = g.lookup(ctx, host); err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	var first error
	for _, ip := range ips {
		conn, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		if first == nil || errors.Is(err, ErrAddrNotAllowed) {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}
