package web

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// Identity is who a token is: its role and its NAME (a decision's by).
type Identity struct {
	Role Role
	Name string
}

// Tokens are the bearer tokens the HTTP API accepts.
type Tokens map[string]Identity

// ParseTokens reads lines `TOKEN ROLE NAME` (blank lines and lines
// starting with # skipped).
func ParseTokens(r io.Reader) (Tokens, error) {
	out := Tokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("tokens line %d: want TOKEN ROLE NAME", n)
		}
		if !slices.Contains(Roles, Role(f[1])) {
			return nil, fmt.Errorf("tokens line %d: unknown role %q", n, f[1])
		}
		if len(f[0]) < 16 {
			return nil, fmt.Errorf("tokens line %d: a token has at least 16 characters", n)
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("tokens line %d: token given twice", n)
		}
		out[f[0]] = Identity{Role: Role(f[1]), Name: f[2]}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("tokens: none given")
	}
	return out, nil
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
