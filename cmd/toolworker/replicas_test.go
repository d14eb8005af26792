package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestReplicasFlag: --replicas, default OFFLOAD_REPLICAS (SPEC §5.6).
func TestReplicasFlag(t *testing.T) {
	t.Parallel()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "OFFLOAD_REPLICAS" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		env  string
		args []string
		want int
	}{
		{"", nil, 0},
		{"3", nil, 3},
		{"3", []string{"--replicas", "1"}, 1},
		{"", []string{"--replicas", "5"}, 5},
	} {
		o, err := parseFlags(append([]string{"--tools", "all"}, tc.args...), env(tc.env), io.Discard)
		if err != nil || o.conn.Replicas != tc.want {
			t.Errorf("env %q args %v: replicas %v (err %v), want %d", tc.env, tc.args, o, err, tc.want)
		}
	}
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"three", nil, `OFFLOAD_REPLICAS="three"`},
		{"-1", nil, `OFFLOAD_REPLICAS="-1"`},
		{"", []string{"--replicas", "-2"}, "--replicas must not be negative"},
	} {
		var stderr bytes.Buffer
		if code := run(append([]string{"--tools", "all"}, tc.args...), env(tc.env), &stderr, nil, nil); code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("env %q args %v: exit %d, stderr %q, want %d and %q", tc.env, tc.args, code, stderr.String(), exitUsage, tc.want)
		}
	}
}
