package route

import (
	"reflect"
	"testing"

	"github.com/enix/kuik/internal/routing"
)

// TestSameListComparesEveryCandidateField: a candidate differing from another in any one field
// makes a different list, except in the fields decisive clears.
func TestSameListComparesEveryCandidateField(t *testing.T) {
	ignored := map[string]bool{"Trial": true, "DryRun": true, "Policy": true, "Entry": true, "AuthPath": true}
	typ := reflect.TypeFor[routing.Candidate]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		var other routing.Candidate
		if !setNonZero(reflect.ValueOf(&other).Elem().Field(i)) {
			t.Fatalf("field %s: no non-zero value for kind %s; teach setNonZero", f.Name, f.Type.Kind())
		}
		if got, want := sameList([]routing.Candidate{{}}, []routing.Candidate{other}), ignored[f.Name]; got != want {
			t.Errorf("candidates differing only in %s: sameList = %t, want %t", f.Name, got, want)
		}
		delete(ignored, f.Name)
	}
	for name := range ignored {
		t.Errorf("ignored field %s is not a field of routing.Candidate", name)
	}
}

// setNonZero gives v a value other than its zero value.
func setNonZero(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(1)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Struct:
		return v.NumField() > 0 && setNonZero(v.Field(0))
	default:
		return false
	}
	return true
}
