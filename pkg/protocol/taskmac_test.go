package protocol

import "testing"

func TestTaskMAC(t *testing.T) {
	t.Parallel()
	key, data := []byte("k"), []byte(`{"task_id":"x","approved":true}`)
	mac := TaskMAC(key, data)
	if !ValidTaskMAC(key, data, mac) {
		t.Fatal("own MAC refused")
	}
	for name, c := range map[string]struct {
		key, data []byte
		mac       string
	}{
		"other key":  {[]byte("j"), data, mac},
		"other body": {key, []byte(`{"task_id":"y","approved":true}`), mac},
		"no mac":     {key, data, ""},
		"not hex":    {key, data, "zz" + mac[2:]},
	} {
		if ValidTaskMAC(c.key, c.data, c.mac) {
			t.Errorf("%s: accepted", name)
		}
	}
}
