package web

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/offload-dev/offload/pkg/protocol"
)

// Role is what a token may do (SPEC §11).
type Role string

// The roles of SPEC §11.
const (
	// RoleAdmin may do everything.
	RoleAdmin Role = "admin"
	// RoleOperator starts, continues and cancels conversations.
	RoleOperator Role = "operator"
	// RoleApprover decides approvals.
	RoleApprover Role = "approver"
	// RoleAnswerer answers external calls.
	RoleAnswerer Role = "answerer"
	// RoleViewer reads.
	RoleViewer Role = "viewer"
)

// Roles are the roles, in the order of SPEC §11.
var Roles = []Role{RoleAdmin, RoleOperator, RoleApprover, RoleAnswerer, RoleViewer}

// Identity is who a token is: its roles, its NAME (a decision's by) and,
// when it is bound to one, its tenant (SPEC §19): the conversations it
// starts are that tenant's, and it may start or continue no other's.
type Identity struct {
	// Roles are what the token may do: one, or several given as
	// ROLE,ROLE (an MCP or A2A host calls an agent and answers its
	// approvals with one token: operator,approver).
	Roles  []Role
	Name   string
	Tenant string
}

// Has reports whether the identity has role r, or is admin.
func (id Identity) Has(r Role) bool {
	return slices.Contains(id.Roles, RoleAdmin) || slices.Contains(id.Roles, r)
}

// String returns the identity's roles as its tokens line gives them
// (ROLE or ROLE,ROLE).
func (id Identity) String() string {
	names := make([]string, len(id.Roles))
	for i, r := range id.Roles {
		names[i] = string(r)
	}
	return strings.Join(names, ",")
}

// Tokens are the bearer tokens the HTTP API accepts.
type Tokens map[string]Identity

// ParseTokens reads lines `TOKEN ROLE[,ROLE…] NAME [tenant=TENANT]`
// (blank lines and lines starting with # skipped): a token given several
// roles has each (Identity.Roles), a token given a tenant is bound to it
// (Identity.Tenant). A token easily guessed is refused ([weakToken]).
func ParseTokens(r io.Reader) (Tokens, error) {
	out := Tokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 && len(f) != 4 {
			return nil, fmt.Errorf("tokens line %d: want TOKEN ROLE[,ROLE…] NAME [tenant=TENANT]", n)
		}
		var tenant string
		if len(f) == 4 {
			t, ok := strings.CutPrefix(f[3], "tenant=")
			if !ok || t == "" {
				return nil, fmt.Errorf("tokens line %d: want tenant=TENANT after the name, not %q", n, f[3])
			}
			if err := protocol.ValidateTenant(t); err != nil {
				return nil, fmt.Errorf("tokens line %d: %w", n, err)
			}
			tenant = t
		}
		var roles []Role
		for name := range strings.SplitSeq(f[1], ",") {
			r := Role(name)
			switch {
			case !slices.Contains(Roles, r):
				return nil, fmt.Errorf("tokens line %d: unknown role %q", n, name)
			case slices.Contains(roles, r):
				return nil, fmt.Errorf("tokens line %d: role %s given twice", n, name)
			}
			roles = append(roles, r)
		}
		if why := weakToken(f[0]); why != "" {
			return nil, fmt.Errorf("tokens line %d: the token %s: make one with `openssl rand -hex 24`", n, why)
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("tokens line %d: token given twice", n)
		}
		out[f[0]] = Identity{Roles: roles, Name: f[2], Tenant: tenant}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("tokens: none given")
	}
	return out, nil
}

// minTokenBits is the least entropy a token may have, as [weakToken]
// estimates it: 16 random hexadecimal digits (64 bits) have about 54, and
// fewer than 40 about once in 700 (made again, they pass).
const minTokenBits = 40

// weakToken says why tok is easily guessed, or "": it has fewer than 16
// characters; its characters, counted, carry fewer than minTokenBits
// (Shannon's estimate: the entropy of their distribution, times their
// number: aaaa…, 1111…2222…); it is a shorter string repeated
// (passwordpassword); or it is a run in sequence, its consecutive
// characters differing by at most two steps (abcd…, 0123…9abc…).
func weakToken(tok string) string {
	if len(tok) < 16 {
		return "has fewer than 16 characters"
	}
	counts := map[byte]int{}
	for i := range len(tok) {
		counts[tok[i]]++
	}
	bits := 0.0
	for _, c := range counts {
		p := float64(c) / float64(len(tok))
		bits -= float64(c) * math.Log2(p)
	}
	if bits < minTokenBits {
		return fmt.Sprintf("has too little entropy (about %.0f bits, want %d)", bits, minTokenBits)
	}
	for period := 1; period <= len(tok)/2; period++ {
		if tok[period:] == tok[:len(tok)-period] {
			return "is a pattern repeated"
		}
	}
	steps := map[int]bool{}
	for i := 1; i < len(tok); i++ {
		steps[int(tok[i])-int(tok[i-1])] = true
	}
	if len(steps) <= 2 {
		return "is a run of characters in sequence"
	}
	return ""
}

// AdminTokenFile is the file, in the store's directory, of the admin token
// generated on first start without tokens.
const AdminTokenFile = "serve-admin-token"

// AdminToken returns the admin token kept in dir, generating it (mode
// 0600) on first use.
func AdminToken(dir string) (string, error) {
	path := filepath.Join(dir, AdminTokenFile)
	if b, err := os.ReadFile(path); err == nil {
		if tok := strings.TrimSpace(string(b)); len(tok) >= 16 {
			return tok, nil
		}
		return "", fmt.Errorf("%s: no token in it", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		_ = f.Close()
		return "", err
	}
	return tok, f.Close()
}
