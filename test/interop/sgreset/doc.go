// Command sgreset asks the Linux kernel for a SCSI device reset of a disk,
// as sg3_utils' `sg_reset -d` does (ioctl SG_SCSI_RESET with
// SG_SCSI_RESET_DEVICE), for the interop guest scripts (the lab image has no
// sg3_utils). An SRP initiator (ib_srp) turns it into an SRP_TSK_MGMT
// LOGICAL UNIT RESET, an iSCSI one into a LOGICAL UNIT RESET task
// management request.
//
//	sgreset /dev/sdX
package main
