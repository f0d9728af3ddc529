package erp

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// ValidateBaseURL allows https anywhere and http only for loopback hosts:
// credentials and tokens must never cross a network in clear text.
func ValidateBaseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("%q: HTTPS is required (http:// is accepted only for loopback hosts such as 127.0.0.1 or localhost)", raw)
	default:
		return fmt.Errorf("%q: scheme must be https", raw)
	}
}

// isLoopback reports whether host is localhost or a loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// DetailPath is the path of one record's route: prefix, the id as one
// escaped path segment (an id may hold '/'), suffix. Pass it to Get or
// List as is: the client sends it without escaping it again.
func DetailPath(prefix, id, suffix string) string {
	return prefix + url.PathEscape(id) + suffix
}

// url is the address of path (escaped, as DetailPath makes it) under the
// base URL, with query q.
func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	raw := c.base.EscapedPath() + path
	if p, err := url.PathUnescape(raw); err == nil {
		u.Path, u.RawPath = p, raw
	} else {
		u.Path, u.RawPath = c.base.Path+path, ""
	}
	u.RawQuery = q.Encode()
	return u.String()
}
