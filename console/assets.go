package console

import (
	"embed"
	"io/fs"
)

// The page's files (ui/): index.html, style.css, app.js. Plain files,
// served as they are: no build step, nothing fetched from elsewhere.
//
//go:embed ui
var uiFiles embed.FS

// assets returns the page's files at their root.
func assets() fs.FS {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // a constant, embedded directory
	}
	return sub
}
