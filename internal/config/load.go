package config

import (
	"errors"
	"fmt"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Load decodes, defaults and validates a config.yaml. Unknown fields are errors, so a typo is reported
// rather than silently ignored; every problem is reported at once, each with its field path.
func Load(data []byte) (*Config, error) {
	c := &Config{}
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s is not YAML: %w", Key, err)
	}
	strictErrs, err := kjson.UnmarshalStrict(jsonData, c, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Key, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%s: %w (check the spelling against the configuration reference)", Key, errors.Join(strictErrs...))
	}
	if c.APIVersion == "" && c.Kind == "" {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s has no apiVersion and kind, and is read as %s %s: add `apiVersion: %s` and `kind: %s` at its top, which a later version will require",
			Key, APIVersion, Kind, APIVersion, Kind))
	}
	SetDefaults(c)
	if errs := Validate(c); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return c, nil
}
