package authconf

import (
	"fmt"
	"strings"
)

// User is one user of the authorization block.
type User struct {
	// Name is the user name.
	Name string
	// PasswordEnv is the environment variable the server reads the
	// password from when it starts (a missing one stops the server).
	PasswordEnv string
	// Comment says what the user is for (rendered above its entry).
	Comment string
	// Permissions are the user's; nil for a user that may do everything
	// (admin).
	Permissions *Permissions
}

// PasswordEnv returns the environment variable of user's password,
// OFFLOAD_<USER>_PASSWORD.
func PasswordEnv(user string) string { return "OFFLOAD_" + strings.ToUpper(user) + "_PASSWORD" }

// WorkerUser returns the user named name serving tools, for prefix ("" means the default).
func WorkerUser(prefix, name string, tools []string) User {
	p := Worker(prefix, name, tools)
	return User{Name: name, PasswordEnv: PasswordEnv(name), Comment: "a worker serving " + strings.Join(tools, ", ") + " alone",
		Permissions: &p}
}

// blockName is the name of u's permissions block in the rendered file.
func (u User) blockName() string { return strings.ToUpper(u.Name) }

// writeBlock writes u's permissions block, NAME = {…}, indented by ind.
func (u User) writeBlock(b *strings.Builder, ind string) {
	fmt.Fprintf(b, "%s%s = ", ind, u.blockName())
	u.Permissions.write(b, ind)
	b.WriteString("\n")
}

// write writes p as a nats-server permissions map.
func (p Permissions) write(b *strings.Builder, ind string) {
	b.WriteString("{\n")
	section := func(name string, rules []Rule) {
		fmt.Fprintf(b, "%s  %s = {\n%s    allow = [\n", ind, name, ind)
		for _, r := range rules {
			if r.Comment != "" {
				for _, line := range strings.Split(r.Comment, "\n") {
					fmt.Fprintf(b, "%s      #%s\n", ind, prefixSpace(line))
				}
			}
			for _, s := range r.Subjects {
				fmt.Fprintf(b, "%s      %q,\n", ind, s)
			}
		}
		fmt.Fprintf(b, "%s    ]\n%s  }\n", ind, ind)
	}
	section("publish", p.Publish)
	section("subscribe", p.Subscribe)
	fmt.Fprintf(b, "%s}", ind)
}

func prefixSpace(line string) string {
	if strings.HasPrefix(line, " ") {
		return line
	}
	return " " + line
}

// Entry returns u's entry of a users list with its permissions inline,
// to paste into the users list of an authorization block (for a user of
// one's own tools; see `toolworker --print-auth`).
func (u User) Entry() string {
	var b strings.Builder
	fmt.Fprintf(&b, "    # %s; password from $%s; start it with --inbox-prefix %s\n", u.Comment, u.PasswordEnv, InboxPrefix(u.Name))
	fmt.Fprintf(&b, "    { user: %s, password: $%s, permissions: ", u.Name, u.PasswordEnv)
	u.Permissions.write(&b, "    ")
	b.WriteString(" }\n")
	return b.String()
}

// File is an authorization block and the comment above it.
type File struct {
	// Header is the comment above the block, without the "# ".
	Header string
	// Users are the block's users, in order.
	Users []User
}

// Render returns f as nats-server configuration text.
func (f File) Render() string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(f.Header, "\n"), "\n") {
		b.WriteString(strings.TrimRight("# "+line, " ") + "\n")
	}
	b.WriteString("authorization {\n")
	for _, u := range f.Users {
		if u.Permissions == nil {
			continue
		}
		if u.Comment != "" {
			fmt.Fprintf(&b, "  # %s\n", u.Comment)
		}
		u.writeBlock(&b, "  ")
		b.WriteString("\n")
	}
	b.WriteString("  users = [\n")
	width := 0
	for _, u := range f.Users {
		width = max(width, len(u.Name))
	}
	for _, u := range f.Users {
		pad := strings.Repeat(" ", width-len(u.Name))
		if u.Permissions == nil {
			fmt.Fprintf(&b, "    # %s\n    { user: %s,%s password: $%s }\n", u.Comment, u.Name, pad, u.PasswordEnv)
			continue
		}
		fmt.Fprintf(&b, "    { user: %s,%s password: $%s,%s permissions: $%s }\n", u.Name, pad, u.PasswordEnv, pad, u.blockName())
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}
