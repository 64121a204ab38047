package main

import (
	"os"
	"path/filepath"

	"github.com/enix/kuik/hack/internal/chartvalues"
)

// valuesPage lists every value of the chart, from the "# --" comments of values.yaml.
func valuesPage(root string) (string, error) {
	values, err := os.ReadFile(filepath.Join(root, "charts", "kuik", "values.yaml"))
	if err != nil {
		return "", err
	}
	rows, err := chartvalues.Rows(values)
	if err != nil {
		return "", err
	}
	return "Every value of the kuik chart, with its default.\n" +
		"A value documented as an object is set as a whole; its keys are not listed apart.\n\n" +
		chartvalues.Table(rows), nil
}
