// Package secret resolves the secrets the commands take (tokens): from a
// file (a mounted Kubernetes secret), the environment, or, discouraged, a
// flag, whose value shows in the process's command line.
package secret

import (
	"fmt"
	"os"
	"strings"
)

// Resolve returns the secret named name: flagValue when set, else the
// first line of file when set, else the environment variable env. Setting
// both the value and the file is an error, as is a file that is empty.
func Resolve(name, flagValue, file, env string) (string, error) {
	switch {
	case flagValue != "" && file != "":
		return "", fmt.Errorf("--%s and --%s-file are exclusive; keep the file", name, name)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--%s-file: %w", name, err)
		}
		v, _, _ := strings.Cut(string(b), "\n")
		if v = strings.TrimSpace(v); v == "" {
			return "", fmt.Errorf("--%s-file %s is empty", name, file)
		}
		return v, nil
	case flagValue != "":
		return flagValue, nil
	}
	return os.Getenv(env), nil
}
