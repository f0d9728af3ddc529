package erp

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// ValidateBaseURL allows https anywhere and http only for loopback hosts:
// credentials and tokens must never cross a network in clear text. It
// refuses user information (user:password@) and a query or fragment: each
// request is built from the base URL's scheme, host and path with a query
// of its own, so they would be dropped silently, and what they carry (a
// password, an API key) is a secret that configuration keeps apart. Its
// error never quotes them (RedactURL).
func ValidateBaseURL(raw string) error {
	shown := RedactURL(raw)
	u, err := url.Parse(raw)
	switch {
	case err == nil && u.User != nil, err != nil && strings.Contains(shown, redacted+"@"):
		return fmt.Errorf("%q: user information (user:password@) is refused in the base URL: it would be dropped from every request; "+
			"give the login's credentials in its own settings, which are kept secret", shown)
	case strings.Contains(raw, "?"):
		return fmt.Errorf("%q: a query (?...) is refused in the base URL: every request sends a query of its own, so it would be dropped; "+
			"an API key or token belongs in the login's credentials", shown)
	case strings.Contains(raw, "#"):
		return fmt.Errorf("%q: a fragment (#...) is refused in the base URL: it is never sent", shown)
	case err != nil:
		return fmt.Errorf("%q is not a URL", shown)
	case u.Host == "":
		return fmt.Errorf("%q has no host", shown)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("%q: HTTPS is required (http:// is accepted only for loopback hosts such as 127.0.0.1 or localhost)", shown)
	default:
		return fmt.Errorf("%q: scheme must be https", shown)
	}
}

// redacted stands for what RedactURL masks.
const redacted = "[redacted]"

// RedactURL is a base URL as it may be shown: its user information, the
// values of its query and its fragment masked. It works on the text, so
// that a URL that does not parse is masked too.
func RedactURL(raw string) string {
	rest, query, fragment := raw, "", ""
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest, fragment = rest[:i], "#"+redacted
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		var keys []string
		for _, kv := range strings.Split(rest[i+1:], "&") {
			// A key is shown, a value never; a lone word may be a token.
			if k, _, ok := strings.Cut(kv, "="); ok && k != "" {
				keys = append(keys, k+"="+redacted)
			} else if kv != "" {
				keys = append(keys, redacted)
			}
		}
		rest, query = rest[:i], "?"+strings.Join(keys, "&")
	}
	// Everything before the last '@' is masked: a password may hold a
	// '/', so where the host begins cannot be told from the first one.
	if scheme, after, ok := strings.Cut(rest, "//"); ok {
		if at := strings.LastIndexByte(after, '@'); at >= 0 {
			after = redacted + after[at:]
		}
		rest = scheme + "//" + after
	}
	return rest + query + fragment
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
