package nvmeof

import "testing"

// Static size and layout checks against the Linux structs. Each pair of
// array declarations fails to compile unless the two constants are equal.
var (
	_ [SQESize - 64]struct{} // sizeof(struct nvme_command)
	_ [64 - SQESize]struct{}
	_ [CQESize - 16]struct{} // sizeof(struct nvme_completion)
	_ [16 - CQESize]struct{}
	_ [SGLSize - 16]struct{} // sizeof(struct nvme_keyed_sgl_desc)
	_ [16 - SGLSize]struct{}
	_ [OffsetDPTR + SGLSize - OffsetCDW10]struct{} // dptr ends where cdw10 starts
	_ [OffsetCDW10 - OffsetDPTR - SGLSize]struct{}
	_ [OffsetCDW15 + 4 - SQESize]struct{}
	_ [SQESize - OffsetCDW15 - 4]struct{}
	_ [DSMRangeSize - 16]struct{} // sizeof(struct nvme_dsm_range)
	_ [16 - DSMRangeSize]struct{}

	_ [ConnectDataSize - 1024]struct{} // sizeof(struct nvmf_connect_data)
	_ [1024 - ConnectDataSize]struct{}
	_ [ConnectDataHostNQNOffset + 2*NQNFieldSize - ConnectDataSize]struct{} // hostnqn then resv5[256]
	_ [ConnectDataSize - ConnectDataHostNQNOffset - 2*NQNFieldSize]struct{}

	_ [CMRequestSize - 32]struct{} // sizeof(struct nvme_rdma_cm_req)
	_ [32 - CMRequestSize]struct{}
	_ [CMAcceptSize - 32]struct{} // sizeof(struct nvme_rdma_cm_rep)
	_ [32 - CMAcceptSize]struct{}
	_ [CMRejectSize - 4]struct{} // sizeof(struct nvme_rdma_cm_rej)
	_ [4 - CMRejectSize]struct{}

	_ [IdentifySize - 4096]struct{} // NVME_IDENTIFY_DATA_SIZE
	_ [4096 - IdentifySize]struct{}
	_ [idcPSD + maxPowerStates*powerStateSize - idcVS]struct{} // psd[32] then vs[1024]
	_ [idcVS - idcPSD - maxPowerStates*powerStateSize]struct{}
	_ [idcVS + 1024 - IdentifySize]struct{}
	_ [IdentifySize - idcVS - 1024]struct{}
	_ [idnLBAF + maxLBAFormats*lbafSize - idnVS]struct{} // lbaf[64] then vs[3712]
	_ [idnVS - idnLBAF - maxLBAFormats*lbafSize]struct{}
	_ [idnVS + 3712 - IdentifySize]struct{}
	_ [IdentifySize - idnVS - 3712]struct{}

	_ [SMARTLogSize - 512]struct{} // sizeof(struct nvme_smart_log)
	_ [512 - SMARTLogSize]struct{}
	_ [smartThermal2Time + 4 + 280 - SMARTLogSize]struct{} // rsvd232[280]
	_ [SMARTLogSize - smartThermal2Time - 4 - 280]struct{}
	_ [ErrorLogEntrySize - 64]struct{} // sizeof(struct nvme_error_slot)
	_ [64 - ErrorLogEntrySize]struct{}
	_ [FirmwareSlotLogSize - 512]struct{} // sizeof(struct nvme_fw_slot_info_log)
	_ [512 - FirmwareSlotLogSize]struct{}
	_ [CommandEffectsLogSize - 4096]struct{} // sizeof(struct nvme_effects_log)
	_ [4096 - CommandEffectsLogSize]struct{}

	_ [DiscoveryLogHeaderSize - 1024]struct{} // sizeof(struct nvmf_disc_rsp_page_hdr)
	_ [1024 - DiscoveryLogHeaderSize]struct{}
	_ [DiscoveryLogEntrySize - 1024]struct{} // sizeof(struct nvmf_disc_rsp_page_entry)
	_ [1024 - DiscoveryLogEntrySize]struct{}
	_ [dleTSAS + 256 - DiscoveryLogEntrySize]struct{} // tsas[256] ends the entry
	_ [DiscoveryLogEntrySize - dleTSAS - 256]struct{}
)

// TestLayoutOffsets checks the field offsets against the numbers read off
// the Linux structs, so a typo in a constant cannot hide behind a test that
// uses the same constant.
func TestLayoutOffsets(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"nvme_rw_command.slba", OffsetSLBA, 40},
		{"nvme_rw_command.length", OffsetNLB, 48},
		{"nvme_rw_command.control", OffsetControl, 50},
		{"nvmf_connect_command.recfmt", OffsetConnectRecFmt, 40},
		{"nvmf_connect_command.qid", OffsetConnectQID, 42},
		{"nvmf_connect_command.sqsize", OffsetConnectSQSize, 44},
		{"nvmf_connect_command.cattr", OffsetConnectCAttr, 46},
		{"nvmf_connect_command.kato", OffsetConnectKATO, 48},
		{"nvmf_property_get_command.attrib", OffsetPropertyAttrib, 40},
		{"nvmf_property_get_command.offset", OffsetPropertyOffset, 44},
		{"nvmf_property_set_command.value", OffsetPropertyValue, 48},
		{"nvme_get_log_page_command.lpo", OffsetLogLPO, 48},
		{"nvme_get_log_page_command.csi", offsetLogCSI, 59},
		{"nvme_identify.csi", offsetIdentifyCSI, 47},
		{"nvme_id_ctrl.cntlid", idcCNTLID, 78},
		{"nvme_id_ctrl.cntrltype", idcCNTRLTYPE, 111},
		{"nvme_id_ctrl.oacs", idcOACS, 256},
		{"nvme_id_ctrl.kas", idcKAS, 320},
		{"nvme_id_ctrl.sqes", idcSQES, 512},
		{"nvme_id_ctrl.sgls", idcSGLS, 536},
		{"nvme_id_ctrl.subnqn", idcSUBNQN, 768},
		{"nvme_id_ctrl.ioccsz", idcIOCCSZ, 1792},
		{"nvme_id_ctrl.msdbd", idcMSDBD, 1803},
		{"nvme_id_ns.dlfeat", idnDLFEAT, 33},
		{"nvme_id_ns.anagrpid", idnANAGRPID, 92},
		{"nvme_id_ns.nguid", idnNGUID, 104},
		{"nvme_id_ns.lbaf", idnLBAF, 128},
		{"nvme_smart_log.data_units_read", smartDataUnitsRead, 32},
		{"nvme_smart_log.temp_sensor", smartTempSensors, 200},
		{"nvmf_disc_rsp_page_entry.trsvcid", dleTrSvcID, 32},
		{"nvmf_disc_rsp_page_entry.subnqn", dleSubNQN, 256},
		{"nvmf_disc_rsp_page_entry.traddr", dleTrAddr, 512},
		{"nvmf_disc_rsp_page_entry.tsas.rdma.pkey", dleRDMAPKey, 776},
	} {
		if c.got != c.want {
			t.Errorf("offset of %s = %d, want %d", c.name, c.got, c.want)
		}
	}
}
