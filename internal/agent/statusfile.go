package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// writeStatusFile replaces path with the report as JSON (what /leader says). It writes a temporary file
// in the same directory and renames it over path, so a reader sees the old content or the new, never a
// torn write.
func writeStatusFile(path string, report any) error {
	data, err := json.Marshal(report)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once the rename has happened
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
