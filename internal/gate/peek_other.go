//go:build !unix

package gate

// open reports whether c may carry the next request. Only a free connection's buffered bytes tell here:
// the agent runs on Linux (peek_unix.go peeks at the socket), and this file lets packages that import the
// gate, as the kubectl plugin does through inject, build for Windows.
func (c *upstreamConn) open() bool {
	return c.r.Buffered() == 0
}
