/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * kfd_bridge: the interface between the module and the daemon that serves the devices
 * (kfd-simd). Mirrored in Rust by kfd-sim/src/cuse/bridge/proto.rs; README.md describes it.
 */
#ifndef KFD_BRIDGE_H
#define KFD_BRIDGE_H

#include <linux/ioctl.h>
#include <linux/types.h>

/*
 * Bumped on any change of what follows. 2 added KFD_BRIDGE_IOC_OPEN_ACCESS; a daemon that knows
 * it may still speak 1 (without the caller's device cgroup). 3 added KFD_BRIDGE_IOC_TAKE_UNMAPS;
 * a daemon that knows it may still speak 1 or 2 (without the clients' unmaps). 4 added
 * KFD_BRIDGE_UNMAPS_RELEASED and the take of no entries (a look); a daemon that knows it may
 * still speak 1 to 3 (without the release of the clients' mms).
 */
#define KFD_BRIDGE_VERSION 4

/* ---- Requests on the control device, /dev/kfd-bridge ---- */

#define KFD_BRIDGE_IOC_TYPE 0xB7

/* Creates a proxy device in front of a CUSE device. */
struct kfd_bridge_create {
	/* Path of the CUSE device node to forward to, resolved in the caller's namespaces. */
	char backend[128];
	/* Device name; a '!' becomes a '/' under /dev ("dri!renderD128"). */
	char name[64];
	/* In: 0 for a dynamic major. Out: the numbers the proxy got. */
	__u32 major;
	__u32 minor;
};

/* An mmap of a proxy waiting for its answer, as the daemon reads it. */
struct kfd_bridge_mmap_query {
	__u64 id;	/* in: the argument of the KFD_BRIDGE_SIM_MMAP request */
	__u64 offset;	/* out: byte offset of the mapping in the device */
	__u64 length;	/* out: bytes */
	__u32 flags;	/* out: KFD_BRIDGE_MAP_* */
	__u32 tid;	/* out: the mapping thread, in the daemon's pid namespace */
};

#define KFD_BRIDGE_MAP_SHARED	(1u << 0)	/* MAP_SHARED */
#define KFD_BRIDGE_MAP_READ	(1u << 1)	/* PROT_READ */
#define KFD_BRIDGE_MAP_WRITE	(1u << 2)	/* PROT_WRITE */
#define KFD_BRIDGE_MAP_EXEC	(1u << 3)	/* PROT_EXEC */
#define KFD_BRIDGE_MAP_MAYWRITE	(1u << 4)	/* could become writable (VM_MAYWRITE) */

/* The daemon's answer: which shared memory backs the mapping. */
struct kfd_bridge_mmap_answer {
	__u64 id;
	__s32 fd;	/* a memfd (shmem file) of the daemon */
	__u32 flags;	/* KFD_BRIDGE_VMA_* */
	__u64 offset;	/* byte offset in that file of the mapping's first page */
};

#define KFD_BRIDGE_VMA_IO		(1u << 0)	/* VM_IO */
#define KFD_BRIDGE_VMA_DONTCOPY		(1u << 1)	/* VM_DONTCOPY: not inherited by fork */
#define KFD_BRIDGE_VMA_NORESERVE	(1u << 2)	/* VM_NORESERVE */
#define KFD_BRIDGE_VMA_DONTDUMP		(1u << 3)	/* VM_DONTDUMP: not in core dumps */
#define KFD_BRIDGE_VMA_ACCESS		(1u << 4)	/* readable by ptrace, /proc/PID/mem */
#define KFD_BRIDGE_VMA_NO_MAYWRITE	(1u << 5)	/* clear VM_MAYWRITE */

/* One fd to install into the caller of the ioctl being served. */
struct kfd_bridge_fd {
	__s32 fd;	/* the daemon's fd of the file to install */
	__u32 flags;	/* 0 or O_CLOEXEC */
	__u64 addr;	/* the caller's address of the __u32 that receives the number */
};

/* The fds an ioctl of thread `tid` returns, handed over before the daemon answers it. */
struct kfd_bridge_push_fds {
	__u32 tid;	/* in the daemon's pid namespace (the pid of the FUSE request) */
	__u32 count;
	__u64 fds;	/* address of `count` struct kfd_bridge_fd */
};

/* The caller's device cgroup verdict on one proxy, taken when it opened a proxy. */
struct kfd_bridge_dev_access {
	__u32 major;
	__u32 minor;
	__s32 result;	/* 0: read and write allowed; else -errno (-EPERM) */
	__u32 pad;
};

/* The verdicts of an open through a proxy that is waiting for the daemon's FUSE_OPEN answer. */
struct kfd_bridge_open_access {
	__u32 tid;	/* in: the opening thread, in the daemon's pid namespace */
	__u32 count;	/* in: room at `devs`; out: the number of proxies (entries written: min) */
	__u64 devs;	/* address of `count` struct kfd_bridge_dev_access */
};

/* One address range a client unmapped (bytes, end exclusive). */
struct kfd_bridge_unmap {
	__u64 start;
	__u64 end;
};

/*
 * The unmaps recorded for one process since the daemon last took them, oldest first. With
 * `count` 0 (version 4) nothing is taken: the flags say what there is (MORE: some are recorded).
 */
struct kfd_bridge_take_unmaps {
	__u32 tgid;	/* in: the process, in the daemon's pid namespace */
	__u32 count;	/* in: room at `ranges` (0: a look); out: entries written */
	__u32 flags;	/* out: KFD_BRIDGE_UNMAPS_* */
	__u32 pad;
	__u64 ranges;	/* address of `count` struct kfd_bridge_unmap */
};

#define KFD_BRIDGE_UNMAPS_LOST	(1u << 0)	/* some went unrecorded (the queue was full) */
#define KFD_BRIDGE_UNMAPS_MORE	(1u << 1)	/* more are recorded than fitted: take again */
/*
 * Version 4: the process's mm with a proxy file open was torn down (it exited, or called execve
 * and has no proxy file open from its new mm): amdkfd's MMU notifier release. Nothing more is
 * recorded for it; set on every take until its last proxy file closes.
 */
#define KFD_BRIDGE_UNMAPS_RELEASED (1u << 2)

#define KFD_BRIDGE_IOC_VERSION	   _IOR(KFD_BRIDGE_IOC_TYPE, 0, __u32)
#define KFD_BRIDGE_IOC_CREATE	   _IOWR(KFD_BRIDGE_IOC_TYPE, 1, struct kfd_bridge_create)
#define KFD_BRIDGE_IOC_MMAP_QUERY  _IOWR(KFD_BRIDGE_IOC_TYPE, 2, struct kfd_bridge_mmap_query)
#define KFD_BRIDGE_IOC_MMAP_ANSWER _IOW(KFD_BRIDGE_IOC_TYPE, 3, struct kfd_bridge_mmap_answer)
#define KFD_BRIDGE_IOC_PUSH_FDS	   _IOW(KFD_BRIDGE_IOC_TYPE, 4, struct kfd_bridge_push_fds)
#define KFD_BRIDGE_IOC_OPEN_ACCESS _IOWR(KFD_BRIDGE_IOC_TYPE, 5, struct kfd_bridge_open_access)
#define KFD_BRIDGE_IOC_TAKE_UNMAPS _IOWR(KFD_BRIDGE_IOC_TYPE, 6, struct kfd_bridge_take_unmaps)

/* ---- Requests the module sends to the CUSE device (outside amdkfd's and amdgpu's tables) ---- */

/*
 * _IO('K', 0x7c): "answer mmap query <arg>". Sent by the module only, on the backend file,
 * in the mapping thread's context; a proxy refuses it from userspace (EINVAL, as the drivers).
 * The daemon reads the query, answers it, and returns 0 or -errno (the mmap's result).
 */
#define KFD_BRIDGE_SIM_MMAP _IO('K', 0x7c)

#endif /* KFD_BRIDGE_H */
