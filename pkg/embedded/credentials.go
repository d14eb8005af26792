package embedded

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nkeys"
)

// secureDir creates dir with mode 0700, or tightens an existing one to it:
// the store holds the credentials of the embedded server.
func secureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("embedded: create store: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("embedded: store: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("embedded: store %s is not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // G302: a directory, owner-only; it needs x to be entered
			return fmt.Errorf("embedded: tighten store: %w", err)
		}
	}
	return nil
}

// tighten sets an existing file's mode to 0600.
func tighten(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	if fi.Mode().Perm() != 0o600 {
		if err := os.Chmod(path, 0o600); err != nil {
			return fmt.Errorf("embedded: tighten %s: %w", path, err)
		}
	}
	return nil
}

// loadOrCreateUser returns the public key of the store's user, whose seed
// is kept at path (mode 0600), generating it on first use, and the task
// key derived from the seed (see [Server.TaskKey]).
func loadOrCreateUser(path string) (pub string, taskKey []byte, err error) {
	if err := tighten(path); err != nil {
		return "", nil, err
	}
	seed, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", nil, fmt.Errorf("embedded: create nkey: %w", err)
		}
		if seed, err = kp.Seed(); err != nil {
			return "", nil, fmt.Errorf("embedded: create nkey: %w", err)
		}
		if err := writeAtomic(path, append(bytes.Clone(seed), '\n')); err != nil {
			return "", nil, fmt.Errorf("embedded: write %s: %w", NkeyFile, err)
		}
	} else if err != nil {
		return "", nil, fmt.Errorf("embedded: read %s: %w", NkeyFile, err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return "", nil, fmt.Errorf("embedded: %s holds no valid nkey seed: %w", path, err)
	}
	defer kp.Wipe()
	pub, err = kp.PublicKey()
	if err != nil {
		return "", nil, fmt.Errorf("embedded: %s: %w", path, err)
	}
	mac := hmac.New(sha256.New, bytes.TrimSpace(seed))
	mac.Write([]byte("offload task key v1"))
	return pub, mac.Sum(nil), nil
}
