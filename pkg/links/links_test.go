package links_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/pkg/links"
)

func TestSignVerify(t *testing.T) {
	key := []byte("the service's HMAC key, 32 bytes")
	now := time.Unix(1_800_000_000, 0)
	c := links.Claims{ID: "01J00000000000000000000000", Conversation: "c", Task: "t", Digest: "d", Action: "approve",
		Expires: now.Add(time.Hour).Unix(), To: "ann"}
	tok := links.Sign(key, c)
	got, err := links.Verify(key, tok, now)
	if err != nil || got != c {
		t.Fatalf("Verify = %+v, %v; want %+v", got, err, c)
	}
	if _, err := links.Verify(key, tok, now.Add(time.Hour)); !errors.Is(err, links.ErrExpired) {
		t.Errorf("at its expiry: %v, want ErrExpired", err)
	}
	if _, err := links.Verify([]byte("another key"), tok, now); !errors.Is(err, links.ErrInvalid) {
		t.Errorf("another key: %v, want ErrInvalid", err)
	}
	body, sig, _ := strings.Cut(tok, ".")
	forged := c
	forged.Action = "deny"
	fb, _, _ := strings.Cut(links.Sign([]byte("x"), forged), ".")
	for name, bad := range map[string]string{"claims swapped": fb + "." + sig, "no signature": body, "empty": "", "garbage": "a.b"} {
		if _, err := links.Verify(key, bad, now); !errors.Is(err, links.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	bad := c
	bad.Action = "delete"
	if _, err := links.Verify(key, links.Sign(key, bad), now); !errors.Is(err, links.ErrInvalid) {
		t.Errorf("unknown action: %v, want ErrInvalid", err)
	}
}
