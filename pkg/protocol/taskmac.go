package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// TaskMACHeader is the header in which an agent that holds a task key (the
// embedded default's, derived from its store's credentials) authenticates
// a task it dispatches: the lowercase hex HMAC-SHA256 of the task's JSON
// body, exactly as published ([TaskMAC]). A worker given the same key runs
// an approved task only when the header matches its body, so that whoever
// else can publish a task (a server that is not the store's, relaying its
// own) cannot have an approval-gated tool run. Workers without a key ignore
// it.
const TaskMACHeader = "Offload-Task-Mac"

// TaskMAC returns the value of [TaskMACHeader] for a task whose published
// body is data.
func TaskMAC(key, data []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil))
}

// ValidTaskMAC reports whether mac is [TaskMAC] of data under key, in
// constant time.
func ValidTaskMAC(key, data []byte, mac string) bool {
	got, err := hex.DecodeString(mac)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return hmac.Equal(got, m.Sum(nil))
}
