// Package certs makes the CAs and certificates the suites serve and present, valid from before the test
// began, so that no two harnesses mint them differently.
package certs
