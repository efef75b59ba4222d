package main

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// changelog writes the release's changelog section: the subjects of the commits since the previous tag
// (every commit when there is none), newest first.
func changelog(w io.Writer, version string) error {
	if version == "" {
		return errors.New("--version is required")
	}
	rangeSpec := "HEAD"
	if previous, err := git("describe", "--tags", "--abbrev=0", "HEAD"); err == nil && previous != version {
		rangeSpec = previous + "..HEAD"
	} else if err == nil {
		// HEAD is the release's own tag: compare with the tag before it.
		if before, err := git("describe", "--tags", "--abbrev=0", "HEAD^"); err == nil {
			rangeSpec = before + "..HEAD"
		}
	}
	log, err := git("log", "--no-merges", "--format=- %s (%h)", rangeSpec)
	if err != nil {
		return err
	}
	date, err := git("log", "-1", "--format=%cs") // the commit's date: the same section from the same commit
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "## %s (%s)\n\n%s\n", version, date, log)
	return err
}

func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), strings.TrimSpace(string(exit.Stderr)))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}
