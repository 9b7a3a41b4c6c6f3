// files.go: the files of a sandbox's /workspace through the nsbox Go client (write, read, list, remove).
package nsbox

import (
	"bytes"
	"context"
	"net/url"
	"strings"
)

// Files reaches the sandbox's /workspace; paths are relative to it or absolute under it.
type Files struct{ s *Sandbox }

// Entry is one item of a directory listing. A name that is not UTF-8 is exact in Name and Path (Go strings hold
// bytes): the server sends it as path_encoded, since JSON would show U+FFFD, which names no file.
type Entry struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	PathEncoded string `json:"path_encoded,omitempty"` // the path's bytes percent-encoded; set only for such a name
	Type        string `json:"type"`                   // file, dir, symlink, other
	Size        int64  `json:"size"`
}

// Files returns the sandbox's file API.
func (s *Sandbox) Files() Files { return Files{s} }

func (f Files) path(p string, list bool) string {
	q := "/v1/sandboxes/" + url.PathEscape(f.s.ID) + "/files?path=" + url.QueryEscape(p)
	if list {
		q += "&list=true"
	}
	return q
}

// Write puts data at path, making its parents.
func (f Files) Write(ctx context.Context, path string, data []byte) error {
	resp, cancel, err := f.s.client.request(ctx, "files.write", "PUT", f.path(path, false), bytes.NewReader(data),
		"application/octet-stream", 0)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	_, err = f.s.client.readAll(ctx, resp, "files.write")
	return err
}

// Read returns the file's bytes.
func (f Files) Read(ctx context.Context, path string) ([]byte, error) {
	resp, cancel, err := f.s.client.request(ctx, "files.read", "GET", f.path(path, false), nil, "", 0)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer resp.Body.Close()
	return f.s.client.readAll(ctx, resp, "files.read")
}

// Listing is a directory's entries as the server listed them.
type Listing struct {
	Entries []Entry `json:"entries"`
	// Truncated is true when the server cut the listing short at its cap (20000 entries or 8 MiB): some are missing.
	Truncated bool `json:"truncated"`
}

// List returns the entries of a directory; Listing also says whether the server listed only some of them.
func (f Files) List(ctx context.Context, dir string) ([]Entry, error) {
	l, err := f.Listing(ctx, dir)
	return l.Entries, err
}

// Listing returns the entries of a directory and whether the server cut the listing short.
func (f Files) Listing(ctx context.Context, dir string) (Listing, error) {
	var out Listing
	err := f.s.client.doJSON(ctx, "files.list", "GET", f.path(dir, true), nil, &out)
	for i := range out.Entries {
		e := &out.Entries[i]
		if e.PathEncoded == "" {
			continue
		}
		if exact, uerr := url.PathUnescape(e.PathEncoded); uerr == nil {
			e.Path = exact
			e.Name = exact[strings.LastIndex(exact, "/")+1:]
		}
	}
	return out, err
}

// Remove deletes a file, or a directory recursively.
func (f Files) Remove(ctx context.Context, path string) error {
	return f.s.client.doJSON(ctx, "files.remove", "DELETE", f.path(path, false), nil, nil)
}
