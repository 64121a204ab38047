package transfer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock is a clock whose Sleep advances it.
type fakeClock struct {
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return nil
}

func newFakePacer(cfg PacerConfig) (*Pacer, *fakeClock) {
	c := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	cfg.Now, cfg.Sleep = c.Now, c.Sleep
	return NewPacer(cfg), c
}

// answer sends one request through p's transport to a server answering status with headers.
func answer(t *testing.T, p *Pacer, method, path string, status int, headers map[string]string) (string, error) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	resp, err := p.Transport(http.DefaultTransport).RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
	}
	return strings.TrimPrefix(srv.URL, "http://"), err
}

func TestTokenBucketPacesBeyondTheBurst(t *testing.T) {
	p, clock := newFakePacer(PacerConfig{Rate: 2, Burst: 4})
	for _, n := range []int{3, 1, 2, 1} {
		r, err := p.Wait(t.Context(), "h", n)
		if err != nil {
			t.Fatal(err)
		}
		r.Release()
	}
	// 4 in the burst, then 2 more at 2/s (1 s), then 1 more (0.5 s).
	if diff := cmp.Diff([]time.Duration{time.Second, 500 * time.Millisecond}, clock.slept); diff != "" {
		t.Fatalf("sleeps (-want +got):\n%s", diff)
	}
	if r, err := p.Wait(t.Context(), "other", 4); err != nil || len(clock.slept) != 2 {
		t.Fatalf("another host waited: %v %v", err, clock.slept)
	} else {
		r.Release()
	}
}

func TestReserveOfAnAnnouncedLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		remaining string
		n         int
		wantErr   bool
		wait      time.Duration
	}{
		"well above the reserve":      {"80;w=21600", 10, false, 0},
		"exactly down to the reserve": {"60;w=21600", 10, false, 0},
		"one below the reserve":       {"60;w=21600", 11, true, 216 * time.Second},
		"already at the reserve":      {"50;w=21600", 1, true, 216 * time.Second},
		"a limit without window":      {"50", 1, true, 0},
	} {
		t.Run(name, func(t *testing.T) {
			p, _ := newFakePacer(PacerConfig{})
			host, err := answer(t, p, http.MethodHead, "/v2/lib/manifests/v1", http.StatusOK, map[string]string{
				"ratelimit-limit": "100;w=21600", "ratelimit-remaining": tc.remaining,
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Wait(t.Context(), host, tc.n)
			var q *QuotaError
			if tc.wantErr != errors.As(err, &q) {
				t.Fatalf("got %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && tc.wait > 0 && q.Until.Sub(time.Unix(1_800_000_000, 0)) != tc.wait {
				t.Fatalf("until %s, want now + %s", q.Until, tc.wait)
			}
		})
	}
}

func TestReservedGETsCountUntilSentOrReleased(t *testing.T) {
	p, _ := newFakePacer(PacerConfig{})
	host, _ := answer(t, p, http.MethodHead, "/v2/lib/manifests/v1", http.StatusOK, map[string]string{
		"ratelimit-limit": "100;w=21600", "ratelimit-remaining": "60;w=21600",
	})
	r, err := p.Wait(t.Context(), host, 8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(t.Context(), host, 3); err == nil {
		t.Fatal("8 reserved + 3 would take 60 below 50")
	}
	r.Release()
	if r, err := p.Wait(t.Context(), host, 3); err != nil {
		t.Fatalf("after release: %v", err)
	} else {
		r.Release()
	}
}

func TestTooManyRequestsFreezes(t *testing.T) {
	date := time.Unix(1_800_000_000, 0).Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for name, tc := range map[string]struct {
		headers map[string]string
		want    time.Duration
	}{
		"Retry-After in seconds": {map[string]string{"Retry-After": "120"}, 120 * time.Second},
		"Retry-After as a date":  {map[string]string{"Retry-After": date}, 90 * time.Second},
		"ratelimit-reset":        {map[string]string{"ratelimit-reset": "30"}, 30 * time.Second},
		"no hint":                {nil, 7 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			p, clock := newFakePacer(PacerConfig{Freeze: 7 * time.Minute})
			host, _ := answer(t, p, http.MethodGet, "/v2/lib/manifests/v1", http.StatusTooManyRequests, tc.headers)
			if got := p.FrozenUntil(host).Sub(clock.now); got != tc.want {
				t.Fatalf("frozen for %s, want %s", got, tc.want)
			}
			if _, err := answer(t, p, http.MethodGet, "/v2/lib/blobs/x", http.StatusOK, nil); err != nil {
				t.Fatalf("another host refused: %v", err)
			}
			clock.now = clock.now.Add(tc.want)
			if !p.FrozenUntil(host).IsZero() {
				t.Fatal("still frozen after the hint")
			}
		})
	}
}

func TestParseRateLimit(t *testing.T) {
	for in, want := range map[string]struct {
		n  int
		w  time.Duration
		ok bool
	}{
		"100;w=21600": {100, 6 * time.Hour, true},
		"76":          {76, 0, true},
		" 10 ; w=60 ": {10, time.Minute, true},
		"":            {0, 0, false},
		"many;w=60":   {0, 0, false},
	} {
		n, w, ok := parseRateLimit(in)
		if n != want.n || w != want.w || ok != want.ok {
			t.Errorf("parseRateLimit(%q) = %d %s %v, want %+v", in, n, w, ok, want)
		}
	}
}

func TestParsePinned(t *testing.T) {
	const d = "sha256:9c12ed22b3b2ac443f5e53110b6daeaa0de1489c77426416c9e252af7c55bb55"
	for in, want := range map[string]struct{ ref, digest string }{
		"r.example/lib/app:v1@" + d: {"r.example/lib/app:v1", d},
		"r.example/lib/app@" + d:    {"r.example/lib/app@" + d, d},
		"r.example/lib/app:v1":      {"r.example/lib/app:v1", ""},
	} {
		ref, h, err := ParsePinned(in)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if h.Hex != "" {
			got = h.String()
		}
		if ref.String() != want.ref || got != want.digest {
			t.Errorf("ParsePinned(%q) = %s %s, want %+v", in, ref, got, want)
		}
	}
}
