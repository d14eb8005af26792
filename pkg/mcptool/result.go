package mcptool

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/offload-dev/offload/pkg/message"
	"github.com/offload-dev/offload/pkg/tool"
)

// mapResult maps a CallToolResult to the call's outcome (SPEC §16):
//   - isError: a retry the model sees, with the text parts as its message;
//   - structuredContent (not null): the value, the text parts going to the
//     user content;
//   - else the text parts: one a string, several joined by newlines;
//   - image and audio parts (and embedded blobs): files of the user
//     content; resource links and embedded texts: text parts.
func mapResult(raw json.RawMessage) (any, error) {
	var r struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
		IsError           bool              `json:"isError"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, &MCPError{Code: -32700, Message: "the server's result does not decode: " + clean(err.Error())}
	}
	var texts []string
	var files []message.Content
	for i, part := range r.Content {
		var p struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Data     string `json:"data"`
			MimeType string `json:"mimeType"`
			URI      string `json:"uri"`
			Name     string `json:"name"`
			Resource *struct {
				URI      string  `json:"uri"`
				MimeType string  `json:"mimeType"`
				Text     *string `json:"text"`
				Blob     string  `json:"blob"`
			} `json:"resource"`
		}
		if json.Unmarshal(part, &p) != nil {
			continue
		}
		switch p.Type {
		case "text":
			texts = append(texts, p.Text)
		case "image", "audio":
			data, err := base64.StdEncoding.DecodeString(p.Data)
			if err != nil {
				texts = append(texts, fmt.Sprintf("[%s part %d: undecodable data]", p.Type, i))
				continue
			}
			files = append(files, message.FileContent(fmt.Sprintf("%s-%d%s", p.Type, i, extension(p.MimeType)), p.MimeType, data))
		case "resource_link":
			texts = append(texts, fmt.Sprintf("resource %s (%s)", p.URI, p.Name))
		case "resource":
			switch {
			case p.Resource == nil:
			case p.Resource.Text != nil:
				texts = append(texts, *p.Resource.Text)
			case p.Resource.Blob != "":
				if data, err := base64.StdEncoding.DecodeString(p.Resource.Blob); err == nil {
					files = append(files, message.FileContent(baseName(p.Resource.URI, i), p.Resource.MimeType, data))
				}
			}
		}
	}
	text := strings.Join(texts, "\n")
	if r.IsError {
		if text == "" {
			text = "the tool reported an error"
		}
		return nil, &tool.ModelRetry{Message: text}
	}
	structured := len(bytes.TrimSpace(r.StructuredContent)) > 0 && string(bytes.TrimSpace(r.StructuredContent)) != "null"
	var value any = text
	var user []message.Content
	if structured {
		value = r.StructuredContent
		for _, t := range texts {
			user = append(user, message.TextContent(t))
		}
	}
	user = append(user, files...)
	if len(user) == 0 {
		return value, nil
	}
	return tool.Return{Value: value, Content: user}, nil
}

// extension is a file name extension for a media type.
func extension(mediaType string) string {
	if _, sub, ok := strings.Cut(mediaType, "/"); ok && sub != "" && !strings.ContainsAny(sub, "/;+ ") {
		return "." + sub
	}
	return ""
}

// baseName is a file name for an embedded resource.
func baseName(uri string, i int) string {
	if j := strings.LastIndexByte(uri, '/'); j >= 0 && j+1 < len(uri) {
		return uri[j+1:]
	}
	return fmt.Sprintf("resource-%d", i)
}
