package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// checkSecrets reads the Secret of resource name in every namespace and returns the namespaces
// where it is missing or does not hold exactly want (with the first few reasons).
func (e *env) checkSecrets(ctx context.Context, name string, namespaces []string, want map[string]string) (bad []string, err error) {
	secret := routing.PullSecretName(routing.KindImageAlternative, name)
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := e.cs.CoreV1().Secrets("").List(lctx, metav1.ListOptions{FieldSelector: "metadata.name=" + secret})
	if err != nil {
		return nil, fmt.Errorf("listing the Secrets of %s: %w", name, err)
	}
	got := map[string]*corev1.Secret{}
	for i := range list.Items {
		got[list.Items[i].Namespace] = &list.Items[i]
	}
	for _, ns := range namespaces {
		s := got[ns]
		switch {
		case s == nil:
			bad = append(bad, ns+": missing")
		case s.Type != corev1.SecretTypeDockerConfigJson:
			bad = append(bad, ns+": type "+string(s.Type))
		case s.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBySecretSyncer:
			bad = append(bad, ns+": not labelled managed-by")
		default:
			a, err := authsOf(s)
			if err != nil {
				bad = append(bad, ns+": "+err.Error())
			} else if !maps.Equal(a, want) {
				bad = append(bad, fmt.Sprintf("%s: holds %v", ns, a))
			}
		}
	}
	return bad, nil
}

// waitCorrect polls checkSecrets until every Secret is correct; it returns when that was first
// seen.
func (e *env) waitCorrect(ctx context.Context, name string, namespaces []string, want map[string]string, timeout time.Duration) (time.Time, error) {
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		bad, err := e.checkSecrets(ctx, name, namespaces, want)
		if err != nil && ctx.Err() != nil {
			return false, nil // the poll's own deadline: keep the last result
		}
		if err != nil {
			if len(last) == 0 || last[0] != err.Error() {
				printf(e.w, "  (%s)\n", err)
			}
			last = []string{err.Error()}
			return false, nil
		}
		last = bad
		return len(bad) == 0, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("%d of %d Secrets of %s not correct after %s (first: %v): %w", len(last), len(namespaces), name, timeout, first(last, 5), err)
	}
	return time.Now(), nil
}

func authsOf(s *corev1.Secret) (map[string]string, error) {
	var doc struct {
		Auths map[string]struct{ Username, Password string } `json:"auths"`
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &doc); err != nil {
		return nil, fmt.Errorf("decoding %s/%s: %w", s.Namespace, s.Name, err)
	}
	out := map[string]string{}
	for k, v := range doc.Auths {
		out[k] = v.Username + ":" + v.Password
	}
	return out, nil
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }
