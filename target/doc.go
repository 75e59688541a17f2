// Package target turns a target configuration (the NVMe-oF part in
// nvmetcli's saved JSON format, so Linux users can bring theirs) into a
// running target: it opens the backstores, creates subsystems, namespaces
// and ports, and closes them all again.
package target
