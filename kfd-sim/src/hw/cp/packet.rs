//! The AQL packet and queue layouts the command processor reads: packet types, offsets in
//! `amd_queue_t` and `amd_signal_t`, the queue error codes ROCr's handler knows, PM4 opcode names.

/// Bytes of an AQL packet.
pub(super) const PACKET: u64 = 64;

/// `hsa_packet_type_t`.
pub(super) mod ty {
    pub(in crate::hw::cp) const VENDOR_SPECIFIC: u8 = 0;
    pub(in crate::hw::cp) const INVALID: u8 = 1;
    pub(in crate::hw::cp) const KERNEL_DISPATCH: u8 = 2;
    pub(in crate::hw::cp) const BARRIER_AND: u8 = 3;
    pub(in crate::hw::cp) const BARRIER_OR: u8 = 5;
}

/// The name of an AQL packet type.
pub(super) fn type_name(t: u8) -> &'static str {
    match t {
        0 => "VENDOR_SPECIFIC",
        1 => "INVALID",
        2 => "KERNEL_DISPATCH",
        3 => "BARRIER_AND",
        4 => "AGENT_DISPATCH",
        5 => "BARRIER_OR",
        _ => "reserved-type",
    }
}

/// Offsets in `amd_queue_t` and `amd_signal_t`.
pub(super) mod off {
    /// `read_dispatch_id_field_base_byte_offset`, from the read pointer.
    pub(in crate::hw::cp) const RPTR_BASE: u64 = 8;
    pub(in crate::hw::cp) const TMPRING: usize = 140;
    pub(in crate::hw::cp) const SCRATCH_RSRC: usize = 144;
    pub(in crate::hw::cp) const SCRATCH_BASE: usize = 160;
    pub(in crate::hw::cp) const PROPERTIES: usize = 180;
    pub(in crate::hw::cp) const INACTIVE_SIGNAL: usize = 192;
    /// Bytes of `amd_queue_t` the command processor reads.
    pub(in crate::hw::cp) const QUEUE_BYTES: u64 = 200;
    pub(in crate::hw::cp) const SIG_VALUE: u64 = 8;
    pub(in crate::hw::cp) const SIG_MAILBOX: u64 = 16;
    pub(in crate::hw::cp) const SIG_EVENT_ID: u64 = 24;
    pub(in crate::hw::cp) const SIG_START_TS: u64 = 32;
    pub(in crate::hw::cp) const SIG_END_TS: u64 = 40;
}

/// `queue_properties` bit: profiling timestamps.
pub(super) const PROFILING: u32 = 1 << 3;

/// Queue error codes in `queue_inactive_signal` (ROCr's queue-error handler).
pub(super) mod code {
    pub(in crate::hw::cp) const NO_SCRATCH: u64 = 0x1;
    pub(in crate::hw::cp) const DIMENSIONS: u64 = 0x2;
    pub(in crate::hw::cp) const BAD_CODE: u64 = 0x8;
    pub(in crate::hw::cp) const BAD_FORMAT: u64 = 0x20;
    pub(in crate::hw::cp) const GROUP_TOO_LARGE: u64 = 0x40;
    pub(in crate::hw::cp) const MEMORY_VIOLATION: u64 = 0x2000_0000;
    pub(in crate::hw::cp) const ILLEGAL_INSTRUCTION: u64 = 0x4000_0000;
    pub(in crate::hw::cp) const TRAP: u64 = 0x8000_0000;
}

/// Bits of an end-of-pipe interrupt's context that carry the event id.
pub(super) const EOP_ID_BITS: u32 = 32;
/// Bits of an `s_sendmsg` interrupt's data that carry (part of) the event id.
pub(super) const SENDMSG_ID_BITS: u32 = 24;

pub(super) fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut q = [0u8; 8];
    if let Some(s) = b.get(o..o + 8) {
        q.copy_from_slice(s);
    }
    u64::from_le_bytes(q)
}

pub(super) fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut q = [0u8; 4];
    if let Some(s) = b.get(o..o + 4) {
        q.copy_from_slice(s);
    }
    u32::from_le_bytes(q)
}

/// Names of the PM4 type-3 opcodes ROCr and HIP put in indirect buffers.
pub(super) fn pm4_name(op: u32) -> String {
    match op {
        0x10 => "NOP".into(),
        0x37 => "WRITE_DATA".into(),
        0x3c => "WAIT_REG_MEM".into(),
        0x3f => "INDIRECT_BUFFER".into(),
        0x46 => "EVENT_WRITE".into(),
        0x49 => "RELEASE_MEM".into(),
        0x50 => "DMA_DATA".into(),
        0x58 => "ACQUIRE_MEM".into(),
        0x76 => "SET_SH_REG".into(),
        0x79 => "SET_UCONFIG_REG".into(),
        other => format!("opcode {other:#x}"),
    }
}
