// Package gate is the agent's mutation gate: a reverse proxy in front of the app's port, inside the pod,
// that passes every request while this pod leads and, on a follower, answers mutations itself (HTTP 503
// with Retry-After, gRPC UNAVAILABLE) while reads still reach the app. So an app gets "only the leader
// acts" for its API without a line of code, and readiness stays about health.
//
// The decision (Policy.Mutates) is a pure function of the request's method, protocol, path, content type
// and method overrides; the proxy around it reads leadership per request from the elector, so mutations
// stop at the same instant /leader says the pod no longer leads, and decides again once a forwarded
// request's body is in.
package gate
