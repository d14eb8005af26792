package conversation

import (
	"encoding/json"
	"fmt"
)

// stateVersion is the version of State's JSON form.
const stateVersion = 1

// Encode returns the JSON form of st, with its version.
func Encode(st *State) ([]byte, error) { return encodeState(st) }

// Decode parses the JSON form of a State written by Encode.
func Decode(data []byte) (*State, error) { return decodeState(data) }

type versioned struct {
	Version int `json:"version"`
	*State
}

func encodeState(st *State) ([]byte, error) {
	if st == nil || st.ID == "" {
		return nil, fmt.Errorf("conversation: encode: no conversation ID")
	}
	b, err := json.Marshal(versioned{Version: stateVersion, State: st})
	if err != nil {
		return nil, fmt.Errorf("conversation: encode %s: %w", st.ID, err)
	}
	return b, nil
}

func decodeState(data []byte) (*State, error) {
	v := versioned{State: &State{}}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("conversation: decode: %w", err)
	}
	if v.Version != stateVersion {
		return nil, fmt.Errorf("conversation: decode: unknown state version %d (this program reads %d)", v.Version, stateVersion)
	}
	return v.State, nil
}
