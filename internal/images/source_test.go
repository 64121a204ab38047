package images

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestGitSource(t *testing.T) {
	head, err := exec.CommandContext(t.Context(), "git", "show", "-s", "--format=%H %ct", "HEAD").Output()
	if err != nil {
		t.Skipf("no git checkout here: %v", err)
	}
	rev, ct, _ := strings.Cut(strings.TrimSpace(string(head)), " ")
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		dir, epoch string
		want       Source
		wantErr    bool
	}{
		"a checkout: its HEAD and commit time":  {dir: ".", want: Source{Created: time.Unix(sec, 0).UTC(), Revision: rev}},
		"SOURCE_DATE_EPOCH overrides the time":  {dir: ".", epoch: "1700000000", want: Source{Created: time.Unix(1700000000, 0).UTC(), Revision: rev}},
		"not a checkout: the epoch":             {dir: t.TempDir(), want: Source{Created: time.Unix(0, 0).UTC()}},
		"not a checkout, SOURCE_DATE_EPOCH":     {dir: t.TempDir(), epoch: "42", want: Source{Created: time.Unix(42, 0).UTC()}},
		"a SOURCE_DATE_EPOCH that is no number": {dir: ".", epoch: "yesterday", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", tc.epoch)
			if tc.dir != "." {
				t.Setenv("GIT_CEILING_DIRECTORIES", tc.dir) // whatever holds the temporary directory
			}
			got, err := GitSource(t.Context(), tc.dir)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %t", err, tc.wantErr)
			}
			if !got.Created.Equal(tc.want.Created) || got.Revision != tc.want.Revision {
				t.Errorf("GitSource = %+v, want %+v", got, tc.want)
			}
		})
	}
}
