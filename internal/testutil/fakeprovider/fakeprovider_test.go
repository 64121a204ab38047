package fakeprovider

import (
	"testing"
	"time"
)

func TestVerifyAcceptsOnlyUnexpiredTokensOfItsKey(t *testing.T) {
	key := []byte("k")
	now := time.Unix(1_900_000_000, 0)
	token := Mint(key, now.Add(time.Minute))
	tests := map[string]struct {
		key      []byte
		password string
		at       time.Time
		want     bool
	}{
		"before expiry":          {key, token, now, true},
		"at expiry":              {key, token, now.Add(time.Minute), false},
		"after expiry":           {key, token, now.Add(time.Hour), false},
		"another key":            {[]byte("other"), token, now, false},
		"a tampered expiry":      {key, "2" + token[1:], now, false},
		"not a token":            {key, "password", now, false},
		"an expiry without mac":  {key, "1900000060.", now, false},
		"a non-numeric expiry":   {key, "x." + token[len("1900000060."):], now, false},
		"an empty password":      {key, "", now, false},
		"a token of another key": {key, Mint([]byte("other"), now.Add(time.Minute)), now, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Verify(tc.key, tc.password, tc.at); got != tc.want {
				t.Errorf("Verify = %v, want %v", got, tc.want)
			}
		})
	}
	if exp, ok := Expiry(token); !ok || !exp.Equal(now.Add(time.Minute)) {
		t.Errorf("Expiry = %v, %v; want %v", exp, ok, now.Add(time.Minute))
	}
}

func TestStateDirWithoutRequestsOrMode(t *testing.T) {
	dir := t.TempDir()
	if r, err := Requests(dir); err != nil || len(r) != 0 {
		t.Errorf("Requests = %v, %v; want none", r, err)
	}
	if m := Mode(dir); m != ModeOK {
		t.Errorf("Mode = %q, want %q", m, ModeOK)
	}
	SetMode(t, dir, ModeHang)
	if m := Mode(dir); m != ModeHang {
		t.Errorf("Mode = %q, want %q", m, ModeHang)
	}
}
