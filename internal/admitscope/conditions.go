package admitscope

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// ConditionName names the one condition [Conditions] returns.
const ConditionName = "kuik.enix.io/may-route"

// Reason says what the returned conditions do; a caller puts it in status and a metric label.
type Reason string

const (
	// ReasonFiltered: the condition sends the pods an image of which some resource can cover,
	// and those kuik must look at anyway.
	ReasonFiltered Reason = "Filtered"
	// ReasonCatchAllMirror: an ImageMirror covers every image; every pod is sent.
	ReasonCatchAllMirror Reason = "CatchAllMirror"
	// ReasonTooLarge: the expression would be over Limits.MaxExpressionBytes; every pod is sent.
	ReasonTooLarge Reason = "ExpressionTooLarge"
	// ReasonTooCostly: the cost budget would leave room for fewer than Limits.MinContainers
	// containers a pod; every pod is sent.
	ReasonTooCostly Reason = "ExpressionTooCostly"
	// ReasonUnsafeEntry: an entry holds a character the condition cannot quote; every pod is
	// sent. Normalized references never do.
	ReasonUnsafeEntry Reason = "UnsafeEntry"
)

// Result is the webhook's matchConditions for a set of routing resources.
type Result struct {
	// Conditions are the webhook's matchConditions: nil sends every pod.
	Conditions []admissionregistrationv1.MatchCondition
	Reason     Reason
	// Message says the same for a person: which mirror, which bound.
	Message string
	// ExpressionBytes is the length of the expression, also of one past a bound.
	ExpressionBytes int
	// MaxContainers: a pod with more containers is sent without its images being looked at.
	MaxContainers int
	// Cost is the estimated worst-case cost of the expression for one pod, in cel-go's units.
	Cost int64
	// ContainerCost is the estimated worst-case cost of one container's image.
	ContainerCost int64
	// UnexpressedExcludes counts the excludeImages globs the condition leaves out (they name
	// a tag or a digest): the images they exclude are sent.
	UnexpressedExcludes int
}

// Limits bound the expression. The API server refuses none of these sizes when the
// configuration is written (the expression's inputs are untyped, so it estimates no cost):
// they keep it from failing at admission, where an error with failurePolicy Ignore skips the
// webhook.
type Limits struct {
	// MaxExpressionBytes bounds the expression's length; cel-go's parser refuses more than
	// 100,000 code points.
	MaxExpressionBytes int
	// CostBudget bounds the estimated cost for one pod; the API server stops an expression at
	// 1,000,000 (k8s.io/apiserver/pkg/apis/cel.PerCallLimit) and the match conditions of one
	// webhook at 2,500,000 (RuntimeCELCostBudgetMatchConditions).
	CostBudget int64
	// MinContainers: past a bound leaving fewer containers a pod, every pod is sent.
	MinContainers int
	// MaxImageBytes: a pod with a longer image is sent without that image being parsed (the
	// cost of a string function grows with its length).
	MaxImageBytes int
	// MaxMetadataKeys: a pod with more labels, or more annotations, is sent.
	MaxMetadataKeys int
}

// DefaultLimits are the limits [Conditions] uses.
func DefaultLimits() Limits {
	return Limits{
		MaxExpressionBytes: 64 << 10,
		CostBudget:         900_000,
		MinContainers:      16,
		MaxImageBytes:      512,
		MaxMetadataKeys:    routing.MaxPodLabels,
	}
}

// Conditions returns the matchConditions of kuik's pod webhook for these routing resources.
// Invalid resources are left out, as the webhook's index leaves them out.
func Conditions(alternatives []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) Result {
	ix, _ := routing.NewIndex(alternatives, mirrors)
	return ForCoverage(ix.Coverage(), DefaultLimits())
}

// ForCoverage returns the matchConditions for what an index covers, within lim.
func ForCoverage(cov routing.Coverage, lim Limits) Result {
	var res Result
	var mirrors []mirrorTerm
	for _, m := range cov.Mirrors {
		t := mirrorTerm{dest: m.Destination}
		for _, g := range m.ExcludeImages {
			re, ok := excludeRegexp(g)
			if !ok {
				res.UnexpressedExcludes++
				continue
			}
			t.excludes = append(t.excludes, re)
		}
		if len(t.excludes) == 0 {
			res.Reason = ReasonCatchAllMirror
			res.Message = fmt.Sprintf("ImageMirror %q covers every image", m.Name)
			if len(m.ExcludeImages) > 0 {
				res.Message += " (its excludeImages name tags or digests, which the condition does not express)"
			}
			return res
		}
		mirrors = append(mirrors, t)
	}
	repos := make([]string, 0, len(cov.Repositories))
	for _, r := range cov.Repositories {
		repos = append(repos, canonicalName(r))
	}
	groups := make([]string, 0, len(cov.Groups))
	for _, g := range cov.Groups {
		groups = append(groups, canonicalGroup(g))
	}
	repos, groups = sorted(repos), sorted(groups)
	for _, s := range [][]string{repos, groups, destinations(mirrors)} {
		for _, e := range s {
			if !quotable(e) {
				res.Reason, res.Message = ReasonUnsafeEntry, fmt.Sprintf("the entry %q holds a character the condition cannot quote", e)
				return res
			}
		}
	}

	perContainer := containerCost(lim, mirrors)
	res.ContainerCost = perContainer
	res.MaxContainers = int((lim.CostBudget - podCost(lim)) / perContainer)
	res.Cost = podCost(lim) + int64(res.MaxContainers)*perContainer
	expr := expression(lim, res.MaxContainers, repos, groups, mirrors)
	res.ExpressionBytes = len(expr)
	switch {
	case res.MaxContainers < lim.MinContainers:
		res.Reason = ReasonTooCostly
		res.Message = fmt.Sprintf("the condition's cost (%d a container) leaves room for %d containers a pod, fewer than %d", perContainer, res.MaxContainers, lim.MinContainers)
		return res
	case len(expr) > lim.MaxExpressionBytes:
		res.Reason = ReasonTooLarge
		res.Message = fmt.Sprintf("the condition would be %d bytes, over %d", len(expr), lim.MaxExpressionBytes)
		return res
	}
	res.Reason = ReasonFiltered
	res.Message = fmt.Sprintf("pods are sent when an image may be covered (%d repositories, %d groups, %d mirrors)", len(repos), len(groups), len(mirrors))
	res.Conditions = []admissionregistrationv1.MatchCondition{{Name: ConditionName, Expression: expr}}
	return res
}

type mirrorTerm struct {
	dest     string
	excludes []string // RE2, each matching no more than its glob
}

func (t mirrorTerm) regexp() string {
	return "^(" + strings.Join(t.excludes, "|") + ")$"
}

func destinations(ms []mirrorTerm) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.dest
	}
	return out
}

// sorted sorts and dedupes: the same resources always give the same expression, so that
// an apply of an unchanged one changes nothing.
func sorted(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// quotable: a normalized reference holds letters, digits and . _ - / : only.
func quotable(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-', c == '/', c == ':':
		default:
			return false
		}
	}
	return true
}

// expression is the one condition: see the package documentation for what it sends.
func expression(lim Limits, maxContainers int, repos, groups []string, mirrors []mirrorTerm) string {
	var b strings.Builder
	b.WriteString("!(request.operation == 'CREATE' && !(has(request.subResource) && request.subResource != ''))")
	fmt.Fprintf(&b, " || [object.metadata.?labels.orValue({}), object.metadata.?annotations.orValue({})].exists(md, size(md) > %d || md.exists(key, key.startsWith('kuik.enix.io/')))", lim.MaxMetadataKeys)

	var match []string
	if len(repos) > 0 {
		match = append(match, "m in repos")
	}
	if len(groups) > 0 {
		match = append(match, "m.substring(0, m.lastIndexOf('/')) in groups")
	}
	for _, t := range mirrors {
		match = append(match, "!(m == '"+t.dest+"' || m.startsWith('"+t.dest+"/') || m.matches('"+t.regexp()+"'))")
	}
	if len(match) == 0 {
		return b.String()
	}
	image := "[c.?image.orValue('')].exists(i, size(i) > " + strconv.Itoa(lim.MaxImageBytes) + " || " + celCanonical(strings.Join(match, " || ")) + ")"
	scan := "cs.exists(c, " + image + ")"
	if len(groups) > 0 {
		scan = "[" + celSet(groups) + "].exists(groups, " + scan + ")"
	}
	if len(repos) > 0 {
		scan = "[" + celSet(repos) + "].exists(repos, " + scan + ")"
	}
	fmt.Fprintf(&b, " || [object.?spec.?initContainers.orValue([]) + object.?spec.?containers.orValue([]) + object.?spec.?ephemeralContainers.orValue([])].exists(cs, size(cs) > %d || %s)", maxContainers, scan)
	return b.String()
}

// celSet is a map literal, whose `in` costs 1 where a list's costs its size.
func celSet(keys []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + k + "': true")
	}
	b.WriteByte('}')
	return b.String()
}

// The estimated cost, in cel-go's runtime units (interpreter/runtimecost.go and the Kubernetes
// library's estimator): a string function costs a tenth of its receiver's length, rounded up;
// matches costs that times a quarter of the pattern's length; every other call, selection,
// comprehension step and literal list costs at most 10. The constants are generous: the
// integration test evaluates the worst pod on the API server at the budget's edge.

// stringUnits is the cost of one string function on the longest string the condition parses:
// an image of MaxImageBytes, plus docker.io/library/.
func stringUnits(lim Limits) int64 {
	return int64(lim.MaxImageBytes+len("docker.io/library/")+10)/10 + 1
}

// containerCost is the cost of one container: about 18 string functions on the whole string
// and 10 bindings for its canonical name and the lookups, and per mirror two comparisons and
// a match. Measured on the API server (the integration test) with the longest images: 790 to
// 985 for the name and lookups (estimated 1,300), about 2,100 for a mirror of 172-byte
// pattern (estimated 2,660).
func containerCost(lim Limits, mirrors []mirrorTerm) int64 {
	t := stringUnits(lim)
	cost := 20*t + 200
	for _, m := range mirrors {
		cost += 3*t + 30 + (t+1)*(int64(len(m.regexp())+3)/4+1)
	}
	return cost
}

// podCost is the cost of one pod without its images: the request's fields, and labels and
// annotations whose keys are qualified names (at most 317 bytes) up to MaxMetadataKeys each.
func podCost(lim Limits) int64 {
	const maxKey = 253 + 1 + 63
	perKey := int64(maxKey/10+1) + 20
	return 2*int64(lim.MaxMetadataKeys)*perKey + 1000
}
