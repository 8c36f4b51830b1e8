//! Every request code equals the literal value of the C header's macro (printed by a C program
//! compiled against <linux/kfd_ioctl.h> and <libdrm/amdgpu_drm.h>), and every argument struct has
//! the size the reference table gives.

use std::mem::size_of;

use kfd_abi::ioctl::{self, drm, kfd, linux618, Dir};
use kfd_sys as sys;
use rstest::rstest;

#[rstest]
#[case::get_version(kfd::GET_VERSION, 0x8008_4b01)]
#[case::create_queue(kfd::CREATE_QUEUE, 0xc058_4b02)]
#[case::destroy_queue(kfd::DESTROY_QUEUE, 0xc008_4b03)]
#[case::set_memory_policy(kfd::SET_MEMORY_POLICY, 0x4020_4b04)]
#[case::get_clock_counters(kfd::GET_CLOCK_COUNTERS, 0xc028_4b05)]
#[case::get_process_apertures(kfd::GET_PROCESS_APERTURES, 0x8190_4b06)]
#[case::update_queue(kfd::UPDATE_QUEUE, 0x4018_4b07)]
#[case::create_event(kfd::CREATE_EVENT, 0xc020_4b08)]
#[case::destroy_event(kfd::DESTROY_EVENT, 0x4008_4b09)]
#[case::set_event(kfd::SET_EVENT, 0x4008_4b0a)]
#[case::reset_event(kfd::RESET_EVENT, 0x4008_4b0b)]
#[case::wait_events(kfd::WAIT_EVENTS, 0xc018_4b0c)]
#[case::dbg_register_deprecated(kfd::DBG_REGISTER_DEPRECATED, 0x4008_4b0d)]
#[case::dbg_unregister_deprecated(kfd::DBG_UNREGISTER_DEPRECATED, 0x4008_4b0e)]
#[case::dbg_address_watch_deprecated(kfd::DBG_ADDRESS_WATCH_DEPRECATED, 0x4010_4b0f)]
#[case::dbg_wave_control_deprecated(kfd::DBG_WAVE_CONTROL_DEPRECATED, 0x4010_4b10)]
#[case::set_scratch_backing_va(kfd::SET_SCRATCH_BACKING_VA, 0xc010_4b11)]
#[case::get_tile_config(kfd::GET_TILE_CONFIG, 0xc028_4b12)]
#[case::set_trap_handler(kfd::SET_TRAP_HANDLER, 0x4018_4b13)]
#[case::get_process_apertures_new(kfd::GET_PROCESS_APERTURES_NEW, 0xc010_4b14)]
#[case::acquire_vm(kfd::ACQUIRE_VM, 0x4008_4b15)]
#[case::alloc_memory_of_gpu(kfd::ALLOC_MEMORY_OF_GPU, 0xc028_4b16)]
#[case::free_memory_of_gpu(kfd::FREE_MEMORY_OF_GPU, 0x4008_4b17)]
#[case::map_memory_to_gpu(kfd::MAP_MEMORY_TO_GPU, 0xc018_4b18)]
#[case::unmap_memory_from_gpu(kfd::UNMAP_MEMORY_FROM_GPU, 0xc018_4b19)]
#[case::set_cu_mask(kfd::SET_CU_MASK, 0x4010_4b1a)]
#[case::get_queue_wave_state(kfd::GET_QUEUE_WAVE_STATE, 0xc018_4b1b)]
#[case::get_dmabuf_info(kfd::GET_DMABUF_INFO, 0xc020_4b1c)]
#[case::import_dmabuf(kfd::IMPORT_DMABUF, 0xc018_4b1d)]
#[case::alloc_queue_gws(kfd::ALLOC_QUEUE_GWS, 0xc010_4b1e)]
#[case::smi_events(kfd::SMI_EVENTS, 0xc008_4b1f)]
#[case::svm(kfd::SVM, 0xc018_4b20)]
#[case::set_xnack_mode(kfd::SET_XNACK_MODE, 0xc004_4b21)]
#[case::criu_op(kfd::CRIU_OP, 0xc038_4b22)]
#[case::available_memory(kfd::AVAILABLE_MEMORY, 0xc010_4b23)]
#[case::version(drm::VERSION, 0xc040_6400)]
#[case::get_unique(drm::GET_UNIQUE, 0xc010_6401)]
#[case::get_magic(drm::GET_MAGIC, 0x8004_6402)]
#[case::get_client(drm::GET_CLIENT, 0xc028_6405)]
#[case::set_version(drm::SET_VERSION, 0xc010_6407)]
#[case::get_cap(drm::GET_CAP, 0xc010_640c)]
#[case::set_client_cap(drm::SET_CLIENT_CAP, 0x4010_640d)]
#[case::auth_magic(drm::AUTH_MAGIC, 0x4004_6411)]
#[case::gem_close(drm::GEM_CLOSE, 0x4008_6409)]
#[case::prime_handle_to_fd(drm::PRIME_HANDLE_TO_FD, 0xc00c_642d)]
#[case::prime_fd_to_handle(drm::PRIME_FD_TO_HANDLE, 0xc00c_642e)]
#[case::amdgpu_gem_create(drm::AMDGPU_GEM_CREATE, 0xc020_6440)]
#[case::amdgpu_gem_mmap(drm::AMDGPU_GEM_MMAP, 0xc008_6441)]
#[case::amdgpu_ctx(drm::AMDGPU_CTX, 0xc010_6442)]
#[case::amdgpu_bo_list(drm::AMDGPU_BO_LIST, 0xc018_6443)]
#[case::amdgpu_cs(drm::AMDGPU_CS, 0xc018_6444)]
#[case::amdgpu_info(drm::AMDGPU_INFO, 0x4020_6445)]
#[case::amdgpu_gem_metadata(drm::AMDGPU_GEM_METADATA, 0xc120_6446)]
#[case::amdgpu_gem_wait_idle(drm::AMDGPU_GEM_WAIT_IDLE, 0xc010_6447)]
#[case::amdgpu_gem_va(drm::AMDGPU_GEM_VA, 0x4028_6448)]
#[case::amdgpu_wait_cs(drm::AMDGPU_WAIT_CS, 0xc020_6449)]
#[case::amdgpu_gem_op(drm::AMDGPU_GEM_OP, 0xc010_6450)]
#[case::amdgpu_gem_userptr(drm::AMDGPU_GEM_USERPTR, 0xc018_6451)]
#[case::amdgpu_wait_fences(drm::AMDGPU_WAIT_FENCES, 0xc018_6452)]
#[case::amdgpu_vm(drm::AMDGPU_VM, 0xc008_6453)]
#[case::amdgpu_fence_to_handle(drm::AMDGPU_FENCE_TO_HANDLE, 0xc020_6454)]
#[case::amdgpu_sched(drm::AMDGPU_SCHED, 0x4010_6455)]
// Linux 6.18's headers (not in Debian bookworm's): printed by the same C program against them.
#[case::gem_change_handle_6_18(linux618::drm::GEM_CHANGE_HANDLE, 0xc008_64d2)]
#[case::amdgpu_gem_op_6_18(linux618::drm::AMDGPU_GEM_OP, 0xc018_6450)]
#[case::amdgpu_gem_list_handles_6_18(linux618::drm::AMDGPU_GEM_LIST_HANDLES, 0xc010_6459)]
#[case::export_dmabuf_kfd_1_12(linux618::kfd::EXPORT_DMABUF, 0xc010_4b24)]
#[case::runtime_enable_kfd_1_13(linux618::kfd::RUNTIME_ENABLE, 0xc010_4b25)]
fn request_code_matches_header(#[case] ours: u32, #[case] header: u32) {
    assert_eq!(
        ours,
        header,
        "{} is {ours:#010x}, header says {header:#010x}",
        ioctl::name(ours)
    );
}

#[test]
fn kfd_table_has_all_35_numbers_in_order() {
    assert_eq!(kfd::TABLE.len(), 35);
    for (i, d) in kfd::TABLE.iter().enumerate() {
        assert_eq!(usize::from(d.nr), i + 1, "{}", d.name);
        assert_eq!(kfd::lookup(d.cmd), Some(d));
    }
    assert_eq!(kfd::lookup(0), None);
    assert_eq!(kfd::lookup(0x24), None);
}

#[test]
fn lookup_ignores_type_direction_and_size_bits_like_the_kernel() {
    let odd = ioctl::encode(Dir::None, b'X', 0x16, 3);
    assert_eq!(
        kfd::lookup(odd).map(|d| d.name),
        Some("ALLOC_MEMORY_OF_GPU")
    );
}

#[rstest]
#[case::get_version(size_of::<sys::kfd_ioctl_get_version_args>(), 8)]
#[case::create_queue(size_of::<sys::kfd_ioctl_create_queue_args>(), 88)]
#[case::destroy_queue(size_of::<sys::kfd_ioctl_destroy_queue_args>(), 8)]
#[case::set_memory_policy(size_of::<sys::kfd_ioctl_set_memory_policy_args>(), 32)]
#[case::get_clock_counters(size_of::<sys::kfd_ioctl_get_clock_counters_args>(), 40)]
#[case::get_process_apertures(size_of::<sys::kfd_ioctl_get_process_apertures_args>(), 400)]
#[case::update_queue(size_of::<sys::kfd_ioctl_update_queue_args>(), 24)]
#[case::create_event(size_of::<sys::kfd_ioctl_create_event_args>(), 32)]
#[case::wait_events(size_of::<sys::kfd_ioctl_wait_events_args>(), 24)]
#[case::set_scratch_backing_va(size_of::<sys::kfd_ioctl_set_scratch_backing_va_args>(), 16)]
#[case::get_tile_config(size_of::<sys::kfd_ioctl_get_tile_config_args>(), 40)]
#[case::set_trap_handler(size_of::<sys::kfd_ioctl_set_trap_handler_args>(), 24)]
#[case::apertures_new(size_of::<sys::kfd_ioctl_get_process_apertures_new_args>(), 16)]
#[case::acquire_vm(size_of::<sys::kfd_ioctl_acquire_vm_args>(), 8)]
#[case::alloc_memory(size_of::<sys::kfd_ioctl_alloc_memory_of_gpu_args>(), 40)]
#[case::map_memory(size_of::<sys::kfd_ioctl_map_memory_to_gpu_args>(), 24)]
#[case::svm(size_of::<sys::kfd_ioctl_svm_args>(), 24)]
#[case::set_xnack_mode(size_of::<sys::kfd_ioctl_set_xnack_mode_args>(), 4)]
#[case::criu_args(size_of::<sys::kfd_ioctl_criu_args>(), 56)]
#[case::available_memory(size_of::<sys::kfd_ioctl_get_available_memory_args>(), 16)]
#[case::process_device_apertures(size_of::<sys::kfd_process_device_apertures>(), 56)]
#[case::event_data(size_of::<sys::kfd_event_data>(), 48)]
#[case::memory_exception_data(size_of::<sys::kfd_hsa_memory_exception_data>(), 32)]
#[case::criu_device_bucket(size_of::<sys::kfd_criu_device_bucket>(), 16)]
#[case::criu_bo_bucket(size_of::<sys::kfd_criu_bo_bucket>(), 48)]
#[case::svm_attribute(size_of::<sys::kfd_ioctl_svm_attribute>(), 8)]
#[case::cs_chunk(size_of::<sys::drm_amdgpu_cs_chunk>(), 16)]
#[case::cs_chunk_ib(size_of::<sys::drm_amdgpu_cs_chunk_ib>(), 32)]
#[case::bo_list_entry(size_of::<sys::drm_amdgpu_bo_list_entry>(), 8)]
#[case::info_device(size_of::<sys::drm_amdgpu_info_device>(), 368)]
fn struct_size_matches_reference(#[case] ours: usize, #[case] reference: usize) {
    assert_eq!(ours, reference);
}

#[test]
fn criu_args_and_bucket_offsets_match_reference() {
    use std::mem::offset_of;
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, devices), 0);
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, bos), 8);
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, priv_data), 16);
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, priv_data_size), 24);
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, num_devices), 32);
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, num_bos), 36);
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, num_objects), 40);
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, pid), 44);
    assert_eq!(offset_of!(sys::kfd_ioctl_criu_args, op), 48);
    assert_eq!(offset_of!(sys::kfd_criu_device_bucket, user_gpu_id), 0);
    assert_eq!(offset_of!(sys::kfd_criu_device_bucket, actual_gpu_id), 4);
    assert_eq!(offset_of!(sys::kfd_criu_device_bucket, drm_fd), 8);
    assert_eq!(offset_of!(sys::kfd_criu_bo_bucket, addr), 0);
    assert_eq!(offset_of!(sys::kfd_criu_bo_bucket, size), 8);
    assert_eq!(offset_of!(sys::kfd_criu_bo_bucket, offset), 16);
    assert_eq!(offset_of!(sys::kfd_criu_bo_bucket, restored_offset), 24);
    assert_eq!(offset_of!(sys::kfd_criu_bo_bucket, gpu_id), 32);
    assert_eq!(offset_of!(sys::kfd_criu_bo_bucket, alloc_flags), 36);
    assert_eq!(offset_of!(sys::kfd_criu_bo_bucket, dmabuf_fd), 40);
}

#[rstest]
#[case::chunk_id_ib(sys::AMDGPU_CHUNK_ID_IB, 1)]
#[case::hw_ip_dma(sys::AMDGPU_HW_IP_DMA, 2)]
#[case::info_dev_info(sys::AMDGPU_INFO_DEV_INFO, 0x16)]
#[case::domain_vram(sys::AMDGPU_GEM_DOMAIN_VRAM, 4)]
#[case::domain_gtt(sys::AMDGPU_GEM_DOMAIN_GTT, 2)]
#[case::va_op_map(sys::AMDGPU_VA_OP_MAP, 1)]
#[case::va_op_unmap(sys::AMDGPU_VA_OP_UNMAP, 2)]
#[case::page_readable(sys::AMDGPU_VM_PAGE_READABLE, 2)]
#[case::page_writeable(sys::AMDGPU_VM_PAGE_WRITEABLE, 4)]
#[case::userptr_anononly(sys::AMDGPU_GEM_USERPTR_ANONONLY, 2)]
#[case::userptr_register(sys::AMDGPU_GEM_USERPTR_REGISTER, 8)]
fn amdgpu_constants_match_header(#[case] ours: u32, #[case] header: u32) {
    assert_eq!(ours, header);
}
