package auth_test

import (
	"fmt"
	"log"

	"github.com/rdisk/rdisk/nvmeof/auth"
)

// Example runs a bidirectional exchange with the ffdhe2048 group, moving the
// messages directly where a transport would carry them in Authentication
// Send (host to controller) and Authentication Receive (controller to
// host) commands.
func Example() {
	const hostNQN = "nqn.2014-08.org.nvmexpress:uuid:6a1a3b1f-0f5e-4a8e-9c39-2d6a8c1c2b7e"
	const subsysNQN = "nqn.2026-11.io.rdisk:default"
	hostSecret, err := auth.ParseSecret("DHHC-1:01:01AOx7HQYsPat9W5bsruzELYzhOqGedtvtAJEmX6jXDl2gnI:")
	if err != nil {
		log.Fatal(err)
	}
	ctrlSecret, err := auth.GenerateSecret(nil, auth.HashSHA384, 0, subsysNQN)
	if err != nil {
		log.Fatal(err)
	}

	host, err := auth.NewHost(auth.HostConfig{HostNQN: hostNQN, SubsysNQN: subsysNQN,
		Secret: hostSecret, CtrlSecret: &ctrlSecret})
	if err != nil {
		log.Fatal(err)
	}
	ctrl, err := auth.NewController(auth.ControllerConfig{HostNQN: hostNQN, SubsysNQN: subsysNQN,
		Secret: hostSecret, CtrlSecret: &ctrlSecret,
		DHGroups: []auth.DHGroupID{auth.DHGroupFFDHE2048, auth.DHGroupNull}})
	if err != nil {
		log.Fatal(err)
	}

	negotiate, _ := host.Start(1)                 // host: Auth Send
	ctrl.Send(negotiate)                          // target: Auth Send handler
	challenge, _ := ctrl.Receive(4096)            // target: Auth Receive handler (AL 4096)
	reply, err := host.HandleChallenge(challenge) // host: Auth Receive, then Auth Send
	if err != nil {
		log.Fatal(err)
	}
	ctrl.Send(reply)
	success1, _ := ctrl.Receive(4096)
	success2, err := host.HandleSuccess1(success1)
	if err != nil {
		log.Fatal(err)
	}
	if success2 != nil { // bidirectional: one more Auth Send
		ctrl.Send(success2)
	}
	fmt.Println(host.State(), ctrl.State(), ctrl.Hash(), ctrl.DHGroup())
	// Output: authenticated authenticated sha256 ffdhe2048
}
