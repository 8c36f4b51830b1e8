// SPDX-License-Identifier: GPL-2.0
/*
 * kfd_bridge: proxy character devices in front of CUSE devices, for what a CUSE
 * server cannot do by itself and a device driver does:
 *
 *   - mmap: a proxy's mapping keeps the proxy file (so /proc/PID/maps names the device) and is
 *     backed by the pages of a memfd the serving daemon chooses for each mmap;
 *   - installing fds into the caller of an ioctl: the daemon hands the files over before it
 *     answers, the proxy installs them in the caller's own context and writes their numbers
 *     where the daemon said;
 *   - the caller's device cgroup: when a proxy is opened, what the opener's device cgroup says of
 *     every proxy (read and write), evaluated in its context and kept for the daemon to read
 *     while it serves the open (amdkfd gives a process only the GPUs whose render node it may
 *     use);
 *   - the clients' unmaps: an MMU notifier on the mm of every process with a proxy file open
 *     records the ranges it unmaps, which the daemon takes before it serves that process's next
 *     call (amdkfd's SVM ranges end where the process unmaps them).
 *
 * Everything else (open, read, write, ioctl, poll, release) goes to the CUSE device's own file
 * operations, in the caller's context, so the daemon sees the caller's pid exactly as when the
 * CUSE device is used directly. The module knows nothing of what it serves (no KFD or DRM
 * layouts): README.md describes the protocol, kfd_bridge.h has its numbers and structs.
 *
 * Lifetimes:
 *   - kb_ctl: one per open of /dev/kfd-bridge; counted by that open file and by each proxy.
 *     Closing the control file removes its proxies (no new opens) and drops what is pending.
 *   - kb_dev: one per proxy; freed with its struct device, which its cdev keeps alive for as
 *     long as any file opened through it exists (cdev_device_add makes the device the cdev's
 *     parent).
 *   - kb_map: one per successful mmap, shared by every VMA made from it (splits, forks); holds
 *     the memfd.
 *   - kb_mm: one per (control file, mm) with a proxy file open; counted by those files (the
 *     last close unregisters its notifier); counts the kb_ctl.
 */
#include <linux/cdev.h>
#include <linux/ctype.h>
#include <linux/device.h>
#include <linux/device_cgroup.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/namei.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/shmem_fs.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/uio.h>
#include <linux/version.h>
#include <linux/xarray.h>

#include "kfd_bridge.h"

/* Bounds on what the daemon may leave pending in the module. */
#define KB_MAX_PENDING_FDS 65536u
/* Unmaps kept per process between two takes; beyond, the process's "lost" flag is set. */
#define KB_MAX_UNMAPS 240u
/* Processes whose mm was torn down that are still reported after their last proxy file closed. */
#define KB_MAX_RELEASED 64u

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
static void kb_vm_flags_set(struct vm_area_struct *vma, vm_flags_t f) { vm_flags_set(vma, f); }
static void kb_vm_flags_clear(struct vm_area_struct *vma, vm_flags_t f) { vm_flags_clear(vma, f); }
#else
static void kb_vm_flags_set(struct vm_area_struct *vma, unsigned long f) { vma->vm_flags |= f; }
static void kb_vm_flags_clear(struct vm_area_struct *vma, unsigned long f) { vma->vm_flags &= ~f; }
#endif

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
#define kb_class_create(name) class_create(name)
#else
#define kb_class_create(name) class_create(THIS_MODULE, name)
#endif

static struct class *kb_class;

/* One open of the control device: the daemon's side. */
struct kb_ctl {
	struct kref ref;
	struct pid_namespace *pid_ns;	/* the daemon's, for the thread ids of the protocol */
	struct mutex lock;		/* protects all below */
	bool dead;			/* the control file was closed */
	struct list_head devs;		/* kb_dev.node */
	struct xarray queries;		/* id -> struct kb_query (on the mapping thread's stack) */
	u32 next_query;
	struct list_head pending;	/* kb_pending.node: fds waiting for their caller */
	unsigned int npending;
	struct list_head opens;		/* kb_open_rec.node: opens waiting for the daemon */
	struct list_head mms;		/* kb_mm.node: the mms with a proxy file open */
	/*
	 * The processes of the last mms that were torn down before their last proxy file closed
	 * (counted; a ring, oldest overwritten): the daemon may ask after the files closed.
	 */
	struct pid *released[KB_MAX_RELEASED];
	unsigned int next_released;
};

/*
 * The unmaps of one mm with a proxy file of `ctl` open, recorded by its MMU notifier. The
 * notifier may run where it must not sleep: its records are a fixed array under a spinlock.
 */
struct kb_mm {
	struct mmu_notifier mn;		/* mn.mm: the mm (held by the registration) */
	struct list_head node;		/* in ctl->mms, under ctl->lock */
	struct kb_ctl *ctl;		/* counted */
	struct pid *tgid;		/* the process that opened the first file */
	unsigned int files;		/* proxy files of this mm open, under ctl->lock */
	spinlock_t lock;		/* protects all below */
	bool gone;			/* the mm is being torn down: nothing more to record */
	bool lost;			/* some unmaps did not fit since the daemon last took them */
	unsigned int count;
	struct kfd_bridge_unmap unmaps[KB_MAX_UNMAPS];	/* oldest first */
};

/* One proxy device. */
struct kb_dev {
	struct device dev;
	struct cdev cdev;
	struct kb_ctl *ctl;		/* counted */
	struct list_head node;		/* in ctl->devs, under ctl->lock */
	spinlock_t lock;		/* protects live and backend */
	bool live;
	struct path backend;		/* the CUSE node, while live */
};

/* One open file of a proxy. */
struct kb_file {
	struct kb_dev *dev;		/* alive while the file is (its cdev reference) */
	struct file *backend;		/* the CUSE device opened for this file */
	struct kb_mm *mm;		/* the opener's unmaps (one of its files) */
};

/* One mmap waiting for the daemon. */
struct kb_query {
	u64 offset;
	u64 length;
	u32 flags;
	u32 tid;
	/* The answer (under ctl->lock). */
	struct file *memfd;
	u64 memfd_offset;
	u32 vma_flags;
};

/* The memory behind the VMAs of one mmap. */
struct kb_map {
	struct kref ref;
	struct file *memfd;
	pgoff_t base;			/* memfd page of the mapping's first device page */
	unsigned long dev_pgoff;	/* that first device page (vm_pgoff at mmap time) */
};

/*
 * An open of a proxy waiting for the daemon (on the opening thread's stack): the caller's
 * device cgroup verdict on every proxy of the same control file, taken in its own context.
 */
struct kb_open_rec {
	struct list_head node;		/* in ctl->opens, under ctl->lock */
	u32 tid;			/* in the daemon's pid namespace */
	u32 count;
	struct kfd_bridge_dev_access *devs;
};

/* An fd to install into a caller. */
struct kb_pending {
	struct list_head node;
	struct pid *pid;		/* the calling thread */
	struct file *file;
	u32 flags;
	u64 addr;
	int fd;				/* reserved number while installing, else -1 */
};

/* ---------------------------------------------------------------- control lifetime */

static void kb_ctl_free(struct kref *ref)
{
	struct kb_ctl *ctl = container_of(ref, struct kb_ctl, ref);
	unsigned int i;

	for (i = 0; i < KB_MAX_RELEASED; i++)
		put_pid(ctl->released[i]);
	xa_destroy(&ctl->queries);
	put_pid_ns(ctl->pid_ns);
	kfree(ctl);
}

static void kb_pending_free(struct kb_pending *p)
{
	if (p->fd >= 0)
		put_unused_fd(p->fd);
	if (p->file)
		fput(p->file);
	put_pid(p->pid);
	kfree(p);
}

static void kb_pending_free_list(struct list_head *list)
{
	struct kb_pending *p, *tmp;

	list_for_each_entry_safe(p, tmp, list, node) {
		list_del(&p->node);
		kb_pending_free(p);
	}
}

/* Moves the pending fds of the calling thread to `out`. */
static void kb_take_pending(struct kb_ctl *ctl, struct list_head *out)
{
	struct pid *me = task_pid(current);
	struct kb_pending *p, *tmp;

	if (!READ_ONCE(ctl->npending))
		return;
	mutex_lock(&ctl->lock);
	list_for_each_entry_safe(p, tmp, &ctl->pending, node) {
		if (p->pid == me) {
			list_move_tail(&p->node, out);
			ctl->npending--;
		}
	}
	mutex_unlock(&ctl->lock);
}

/* ---------------------------------------------------------------- unmaps */

/*
 * amdkfd learns of a process's unmaps from its MMU interval notifiers (an SVM range ends where
 * the process unmaps it); the daemon cannot see them, so each mm with a proxy file open gets a
 * notifier that records them (MMU_NOTIFY_UNMAP: munmap, mremap's old range, a mapping replaced
 * by MAP_FIXED). It runs before munmap returns, so a daemon that takes a process's records before
 * serving each of its calls never serves a call made after an unmap it has not seen.
 */
static int kb_mn_invalidate_range_start(struct mmu_notifier *mn,
					const struct mmu_notifier_range *range)
{
	struct kb_mm *m = container_of(mn, struct kb_mm, mn);
	struct kfd_bridge_unmap *last;

	if (range->event != MMU_NOTIFY_UNMAP)
		return 0;
	/* A spinlock and no allocation: this may be a range that cannot block. */
	spin_lock(&m->lock);
	last = m->count ? &m->unmaps[m->count - 1] : NULL;
	if (m->gone) {
		/* nothing left to tell */
	} else if (last && range->start <= last->end && last->start <= range->end) {
		/* Touching the last record (a munmap in pieces): one record. */
		last->start = min_t(u64, last->start, range->start);
		last->end = max_t(u64, last->end, range->end);
	} else if (m->count < KB_MAX_UNMAPS) {
		m->unmaps[m->count].start = range->start;
		m->unmaps[m->count].end = range->end;
		m->count++;
	} else {
		m->lost = true;
	}
	spin_unlock(&m->lock);
	return 0;
}

/*
 * The mm is being torn down (its process exits or has exec'd): nothing more to record, and the
 * daemon learns of it at its next take (KFD_BRIDGE_UNMAPS_RELEASED), as amdkfd tears the
 * process's queues down from its own notifier's release. The records left are of no use now.
 */
static void kb_mn_release(struct mmu_notifier *mn, struct mm_struct *mm)
{
	struct kb_mm *m = container_of(mn, struct kb_mm, mn);

	spin_lock(&m->lock);
	m->gone = true;
	m->count = 0;
	spin_unlock(&m->lock);
}

static const struct mmu_notifier_ops kb_mn_ops = {
	.release = kb_mn_release,
	.invalidate_range_start = kb_mn_invalidate_range_start,
};

/* The live record of `mm` in `ctl`, counted for one more file; NULL if there is none. */
static struct kb_mm *kb_mm_find(struct kb_ctl *ctl, struct mm_struct *mm)
{
	struct kb_mm *m;

	lockdep_assert_held(&ctl->lock);
	list_for_each_entry(m, &ctl->mms, node) {
		if (m->mn.mm == mm) {
			m->files++;
			return m;
		}
	}
	return NULL;
}

static void kb_mm_free(struct kb_mm *m)
{
	put_pid(m->tgid);
	kref_put(&m->ctl->ref, kb_ctl_free);
	kfree(m);
}

/*
 * The caller's record in `ctl`, made (and its notifier registered) for the first proxy file of
 * its mm. The registration takes the mmap lock: called from open, which holds none.
 */
static struct kb_mm *kb_mm_get(struct kb_ctl *ctl)
{
	struct mm_struct *mm = current->mm;
	struct kb_mm *m, *fresh;
	int err;

	if (!mm)
		return NULL;	/* a kernel thread: it unmaps nothing of a client's */
	mutex_lock(&ctl->lock);
	m = kb_mm_find(ctl, mm);
	mutex_unlock(&ctl->lock);
	if (m)
		return m;

	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL);
	if (!fresh)
		return ERR_PTR(-ENOMEM);
	spin_lock_init(&fresh->lock);
	INIT_LIST_HEAD(&fresh->node);
	fresh->mn.ops = &kb_mn_ops;
	fresh->tgid = get_pid(task_tgid(current));
	kref_get(&ctl->ref);
	fresh->ctl = ctl;
	err = mmu_notifier_register(&fresh->mn, mm);
	if (err) {
		kb_mm_free(fresh);
		return ERR_PTR(err);
	}
	mutex_lock(&ctl->lock);
	m = kb_mm_find(ctl, mm);	/* another thread of the process was quicker */
	if (!m) {
		fresh->files = 1;
		list_add_tail(&fresh->node, &ctl->mms);
	}
	mutex_unlock(&ctl->lock);
	if (!m)
		return fresh;
	mmu_notifier_unregister(&fresh->mn, mm);
	kb_mm_free(fresh);
	return m;
}

/* One proxy file of the mm closed; the last one unregisters the notifier. */
static void kb_mm_put(struct kb_mm *m)
{
	struct kb_ctl *ctl;
	bool last, gone;

	if (!m)
		return;
	ctl = m->ctl;
	mutex_lock(&ctl->lock);
	last = --m->files == 0;
	if (last) {
		list_del_init(&m->node);
		spin_lock(&m->lock);
		gone = m->gone;
		spin_unlock(&m->lock);
		if (gone) {
			/* Still reported as released after the files close (the daemon may ask late). */
			put_pid(ctl->released[ctl->next_released]);
			ctl->released[ctl->next_released] = get_pid(m->tgid);
			ctl->next_released = (ctl->next_released + 1) % KB_MAX_RELEASED;
		}
	}
	mutex_unlock(&ctl->lock);
	if (!last)
		return;
	/* Waits for callbacks in flight; the mm stays valid until it returns (mmgrab'd). */
	mmu_notifier_unregister(&m->mn, m->mn.mm);
	kb_mm_free(m);
}

/* ---------------------------------------------------------------- proxy devices */

static void kb_dev_release(struct device *dev)
{
	struct kb_dev *kd = container_of(dev, struct kb_dev, dev);

	kref_put(&kd->ctl->ref, kb_ctl_free);
	kfree(kd);
}

/* Removes a proxy: no new opens; open files keep working on what they opened. */
static void kb_dev_remove(struct kb_dev *kd)
{
	struct path backend;

	spin_lock(&kd->lock);
	kd->live = false;
	backend = kd->backend;
	memset(&kd->backend, 0, sizeof(kd->backend));
	spin_unlock(&kd->lock);
	cdev_device_del(&kd->cdev, &kd->dev);
	unregister_chrdev_region(kd->dev.devt, 1);
	path_put(&backend);
	put_device(&kd->dev);
}

/*
 * Records what the calling thread's device cgroup allows on each proxy of `ctl` (read and
 * write of the character device, the check the DRM and KFD drivers' users meet at open and
 * amdkfd makes per GPU when it creates a process), for the daemon to read while it serves the
 * open. Without memory the record stays empty and the daemon finds no verdicts (ENOENT).
 */
static void kb_open_begin(struct kb_ctl *ctl, struct kb_open_rec *rec)
{
	struct kb_dev *d;
	u32 n = 0;

	INIT_LIST_HEAD(&rec->node);
	rec->tid = pid_nr_ns(task_pid(current), ctl->pid_ns);
	rec->count = 0;
	rec->devs = NULL;
	mutex_lock(&ctl->lock);
	list_for_each_entry(d, &ctl->devs, node)
		n++;
	if (n)
		rec->devs = kcalloc(n, sizeof(*rec->devs), GFP_KERNEL);
	if (rec->devs) {
		list_for_each_entry(d, &ctl->devs, node) {
			struct kfd_bridge_dev_access *a = &rec->devs[rec->count++];

			a->major = MAJOR(d->dev.devt);
			a->minor = MINOR(d->dev.devt);
			a->result = devcgroup_check_permission(DEVCG_DEV_CHAR, a->major, a->minor,
							       DEVCG_ACC_READ | DEVCG_ACC_WRITE);
		}
		list_add_tail(&rec->node, &ctl->opens);
	}
	mutex_unlock(&ctl->lock);
}

static void kb_open_end(struct kb_ctl *ctl, struct kb_open_rec *rec)
{
	mutex_lock(&ctl->lock);
	list_del_init(&rec->node);
	mutex_unlock(&ctl->lock);
	kfree(rec->devs);
}

static int kb_open(struct inode *inode, struct file *file)
{
	struct kb_open_rec rec;
	struct kb_dev *kd = container_of(inode->i_cdev, struct kb_dev, cdev);
	struct kb_file *kf;
	struct file *backend;
	struct path path;

	spin_lock(&kd->lock);
	if (!kd->live) {
		spin_unlock(&kd->lock);
		return -ENXIO;
	}
	path = kd->backend;
	path_get(&path);
	spin_unlock(&kd->lock);

	kf = kzalloc(sizeof(*kf), GFP_KERNEL);
	if (!kf) {
		path_put(&path);
		return -ENOMEM;
	}
	/* Before the daemon hears of the open: no unmap after it can be missed. */
	kf->mm = kb_mm_get(kd->ctl);
	if (IS_ERR(kf->mm)) {
		long err = PTR_ERR(kf->mm);

		kfree(kf);
		path_put(&path);
		return err;
	}
	/* The CUSE device's open runs here, in the caller's context: the daemon sees its pid. */
	kb_open_begin(kd->ctl, &rec);
	backend = dentry_open(&path, file->f_flags, file->f_cred);
	kb_open_end(kd->ctl, &rec);
	path_put(&path);
	if (IS_ERR(backend)) {
		kb_mm_put(kf->mm);
		kfree(kf);
		return PTR_ERR(backend);
	}
	kf->dev = kd;
	kf->backend = backend;
	file->private_data = kf;
	return 0;
}

static int kb_release(struct inode *inode, struct file *file)
{
	struct kb_file *kf = file->private_data;

	fput(kf->backend);
	kb_mm_put(kf->mm);
	kfree(kf);
	return 0;
}

static ssize_t kb_read_iter(struct kiocb *iocb, struct iov_iter *to)
{
	struct kb_file *kf = iocb->ki_filp->private_data;
	struct kiocb inner;
	ssize_t ret;

	if (!kf->backend->f_op->read_iter)
		return -EINVAL;
	init_sync_kiocb(&inner, kf->backend);
	inner.ki_pos = iocb->ki_pos;
	ret = kf->backend->f_op->read_iter(&inner, to);
	iocb->ki_pos = inner.ki_pos;
	return ret;
}

static ssize_t kb_write_iter(struct kiocb *iocb, struct iov_iter *from)
{
	struct kb_file *kf = iocb->ki_filp->private_data;
	struct kiocb inner;
	ssize_t ret;

	if (!kf->backend->f_op->write_iter)
		return -EINVAL;
	init_sync_kiocb(&inner, kf->backend);
	inner.ki_pos = iocb->ki_pos;
	ret = kf->backend->f_op->write_iter(&inner, from);
	iocb->ki_pos = inner.ki_pos;
	return ret;
}

static __poll_t kb_poll(struct file *file, struct poll_table_struct *wait)
{
	struct kb_file *kf = file->private_data;

	if (!kf->backend->f_op->poll)
		return DEFAULT_POLLMASK;
	return kf->backend->f_op->poll(kf->backend, wait);
}

/*
 * Installs the fds the daemon handed over for this call: reserves every number, writes every
 * number, then installs (which cannot fail). On a failure nothing is installed.
 */
static int kb_install(struct list_head *list)
{
	struct kb_pending *p, *tmp;
	int err = 0;

	list_for_each_entry(p, list, node) {
		p->fd = get_unused_fd_flags(p->flags);
		if (p->fd < 0) {
			err = p->fd;
			goto undo;
		}
	}
	list_for_each_entry(p, list, node) {
		if (put_user((u32)p->fd, (u32 __user *)u64_to_user_ptr(p->addr))) {
			err = -EFAULT;
			goto undo;
		}
	}
	list_for_each_entry_safe(p, tmp, list, node) {
		fd_install(p->fd, p->file);	/* takes our reference */
		p->file = NULL;
		p->fd = -1;
		list_del(&p->node);
		kb_pending_free(p);
	}
	return 0;
undo:
	kb_pending_free_list(list);
	return err;
}

typedef long (*kb_ioctl_fn)(struct file *, unsigned int, unsigned long);

static long kb_forward_ioctl(struct file *file, unsigned int cmd, unsigned long arg, bool compat)
{
	struct kb_file *kf = file->private_data;
	struct kb_ctl *ctl = kf->dev->ctl;
	kb_ioctl_fn fn = compat ? kf->backend->f_op->compat_ioctl : kf->backend->f_op->unlocked_ioctl;
	LIST_HEAD(mine);
	long ret;
	int err;

	/* The module's own request to the daemon; the drivers do not know it either. */
	if (cmd == KFD_BRIDGE_SIM_MMAP)
		return -EINVAL;
	if (!fn)
		return -ENOTTY;
	/* Left over from an earlier call of this thread that did not complete: not ours. */
	kb_take_pending(ctl, &mine);
	kb_pending_free_list(&mine);

	ret = fn(kf->backend, cmd, arg);

	kb_take_pending(ctl, &mine);
	if (list_empty(&mine))
		return ret;
	if (ret < 0) {
		kb_pending_free_list(&mine);
		return ret;
	}
	err = kb_install(&mine);
	return err ? err : ret;
}

static long kb_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	return kb_forward_ioctl(file, cmd, arg, false);
}

static long kb_compat_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	return kb_forward_ioctl(file, cmd, arg, true);
}

/* ---------------------------------------------------------------- mappings */

static void kb_map_free(struct kref *ref)
{
	struct kb_map *m = container_of(ref, struct kb_map, ref);

	fput(m->memfd);
	kfree(m);
}

static void kb_vm_open(struct vm_area_struct *vma)
{
	struct kb_map *m = vma->vm_private_data;

	kref_get(&m->ref);
}

static void kb_vm_close(struct vm_area_struct *vma)
{
	struct kb_map *m = vma->vm_private_data;

	kref_put(&m->ref, kb_map_free);
}

/* The memfd page behind device page `pgoff` (a VMA's pgoff follows its splits). */
static struct page *kb_map_page(struct kb_map *m, pgoff_t pgoff)
{
	if (pgoff < m->dev_pgoff)
		return ERR_PTR(-EINVAL);
	/* Past the memfd's size shmem answers -EINVAL: SIGBUS for a fault. */
	return shmem_read_mapping_page(m->memfd->f_mapping, m->base + (pgoff - m->dev_pgoff));
}

static vm_fault_t kb_vm_fault(struct vm_fault *vmf)
{
	struct page *page = kb_map_page(vmf->vma->vm_private_data, vmf->pgoff);

	if (IS_ERR(page))
		return vmf_error(PTR_ERR(page));
	/* A referenced, unlocked page cache page: the fault code locks and maps it. */
	vmf->page = page;
	return 0;
}

/* ptrace and /proc/PID/mem, which cannot pin pages of a VM_IO mapping: one page at a time. */
static int kb_vm_access(struct vm_area_struct *vma, unsigned long addr, void *buf, int len,
			int write)
{
	pgoff_t pgoff = vma->vm_pgoff + ((addr - vma->vm_start) >> PAGE_SHIFT);
	unsigned long in_page = offset_in_page(addr);
	struct page *page;
	void *kaddr;

	if (len <= 0)
		return 0;
	len = min_t(unsigned long, len, PAGE_SIZE - in_page);
	page = kb_map_page(vma->vm_private_data, pgoff);
	if (IS_ERR(page))
		return -EIO;
	kaddr = kmap_local_page(page);
	if (write) {
		memcpy(kaddr + in_page, buf, len);
		set_page_dirty(page);
	} else {
		memcpy(buf, kaddr + in_page, len);
	}
	kunmap_local(kaddr);
	put_page(page);
	return len;
}

static const struct vm_operations_struct kb_vm_ops = {
	.open = kb_vm_open,
	.close = kb_vm_close,
	.fault = kb_vm_fault,
};

static const struct vm_operations_struct kb_vm_ops_access = {
	.open = kb_vm_open,
	.close = kb_vm_close,
	.fault = kb_vm_fault,
	.access = kb_vm_access,
};

static u32 kb_map_flags(unsigned long vm_flags)
{
	u32 f = 0;

	if (vm_flags & VM_SHARED)
		f |= KFD_BRIDGE_MAP_SHARED;
	if (vm_flags & VM_READ)
		f |= KFD_BRIDGE_MAP_READ;
	if (vm_flags & VM_WRITE)
		f |= KFD_BRIDGE_MAP_WRITE;
	if (vm_flags & VM_EXEC)
		f |= KFD_BRIDGE_MAP_EXEC;
	if (vm_flags & VM_MAYWRITE)
		f |= KFD_BRIDGE_MAP_MAYWRITE;
	return f;
}

/*
 * Asks the daemon, through the backend in this thread's context, which memory backs the
 * mapping. The mmap lock is held for writing meanwhile: the daemon must answer without touching
 * this process's memory (it reads the query from the control device, not from us).
 */
static int kb_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct kb_file *kf = file->private_data;
	struct kb_ctl *ctl = kf->dev->ctl;
	struct kb_query q = {};
	unsigned long vm_set = VM_DONTEXPAND;
	struct kb_map *m;
	long ret;
	u32 id;

	if (!kf->backend->f_op->unlocked_ioctl)
		return -ENODEV;
	q.offset = (u64)vma->vm_pgoff << PAGE_SHIFT;
	q.length = vma->vm_end - vma->vm_start;
	q.flags = kb_map_flags(vma->vm_flags);
	q.tid = pid_nr_ns(task_pid(current), ctl->pid_ns);

	mutex_lock(&ctl->lock);
	if (ctl->dead)
		ret = -ENODEV;
	else
		ret = xa_alloc_cyclic(&ctl->queries, &id, &q, XA_LIMIT(1, INT_MAX),
				      &ctl->next_query, GFP_KERNEL);
	mutex_unlock(&ctl->lock);
	if (ret < 0)
		return ret;

	ret = kf->backend->f_op->unlocked_ioctl(kf->backend, KFD_BRIDGE_SIM_MMAP, id);

	mutex_lock(&ctl->lock);
	xa_erase(&ctl->queries, id);
	mutex_unlock(&ctl->lock);

	if (ret == -ENOTTY)		/* a daemon that does not serve mappings */
		ret = -ENODEV;
	if (ret >= 0 && !q.memfd)
		ret = -EIO;		/* "yes" without saying with what */
	if (ret < 0)
		goto out;
	/* The answer must cover the whole mapping. */
	if (q.memfd_offset + q.length < q.memfd_offset ||
	    q.memfd_offset + q.length > (u64)i_size_read(file_inode(q.memfd))) {
		ret = -EINVAL;
		goto out;
	}
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m) {
		ret = -ENOMEM;
		goto out;
	}
	kref_init(&m->ref);
	m->memfd = q.memfd;
	q.memfd = NULL;
	m->base = q.memfd_offset >> PAGE_SHIFT;
	m->dev_pgoff = vma->vm_pgoff;

	if (q.vma_flags & KFD_BRIDGE_VMA_IO)
		vm_set |= VM_IO;
	if (q.vma_flags & KFD_BRIDGE_VMA_DONTCOPY)
		vm_set |= VM_DONTCOPY;
	if (q.vma_flags & KFD_BRIDGE_VMA_NORESERVE)
		vm_set |= VM_NORESERVE;
	if (q.vma_flags & KFD_BRIDGE_VMA_DONTDUMP)
		vm_set |= VM_DONTDUMP;
	kb_vm_flags_set(vma, vm_set);
	if (q.vma_flags & KFD_BRIDGE_VMA_NO_MAYWRITE)
		kb_vm_flags_clear(vma, VM_MAYWRITE);
	vma->vm_ops = (q.vma_flags & KFD_BRIDGE_VMA_ACCESS) ? &kb_vm_ops_access : &kb_vm_ops;
	vma->vm_private_data = m;
	ret = 0;
out:
	if (q.memfd)
		fput(q.memfd);
	return ret;
}

static const struct file_operations kb_fops = {
	.owner = THIS_MODULE,
	.open = kb_open,
	.release = kb_release,
	.read_iter = kb_read_iter,
	.write_iter = kb_write_iter,
	.poll = kb_poll,
	.unlocked_ioctl = kb_ioctl,
	.compat_ioctl = kb_compat_ioctl,
	.mmap = kb_mmap,
	.llseek = noop_llseek,
};

/* ---------------------------------------------------------------- control requests */

static bool kb_name_ok(const char *name)
{
	const char *c;

	if (!*name)
		return false;
	for (c = name; *c; c++) {
		if (!isalnum(*c) && !strchr("!_.-", *c))
			return false;
	}
	return true;
}

static long kb_ctl_create(struct kb_ctl *ctl, struct kfd_bridge_create __user *uarg)
{
	struct kfd_bridge_create c;
	struct kb_dev *kd;
	dev_t devt;
	int err;

	if (copy_from_user(&c, uarg, sizeof(c)))
		return -EFAULT;
	if (strnlen(c.backend, sizeof(c.backend)) == sizeof(c.backend) ||
	    strnlen(c.name, sizeof(c.name)) == sizeof(c.name) || !kb_name_ok(c.name))
		return -EINVAL;
	if (c.major) {
		devt = MKDEV(c.major, c.minor);
		if (MAJOR(devt) != c.major || MINOR(devt) != c.minor)
			return -EINVAL;
		err = register_chrdev_region(devt, 1, "kfd_bridge");
	} else {
		err = alloc_chrdev_region(&devt, c.minor, 1, "kfd_bridge");
	}
	if (err)
		return err;

	kd = kzalloc(sizeof(*kd), GFP_KERNEL);
	if (!kd) {
		unregister_chrdev_region(devt, 1);
		return -ENOMEM;
	}
	err = kern_path(c.backend, LOOKUP_FOLLOW, &kd->backend);
	if (!err && !S_ISCHR(d_inode(kd->backend.dentry)->i_mode)) {
		path_put(&kd->backend);
		err = -ENOTTY;
	}
	if (err) {
		kfree(kd);
		unregister_chrdev_region(devt, 1);
		return err;
	}
	spin_lock_init(&kd->lock);
	kd->live = true;
	kref_get(&ctl->ref);
	kd->ctl = ctl;
	/* From here on put_device frees kd (and drops the ctl reference). */
	device_initialize(&kd->dev);
	kd->dev.devt = devt;
	kd->dev.class = kb_class;
	kd->dev.release = kb_dev_release;
	err = dev_set_name(&kd->dev, "%s", c.name);
	if (!err) {
		cdev_init(&kd->cdev, &kb_fops);
		kd->cdev.owner = THIS_MODULE;
		err = cdev_device_add(&kd->cdev, &kd->dev);
	}
	if (err) {
		path_put(&kd->backend);
		unregister_chrdev_region(devt, 1);
		put_device(&kd->dev);
		return err;
	}
	mutex_lock(&ctl->lock);
	list_add_tail(&kd->node, &ctl->devs);
	mutex_unlock(&ctl->lock);

	c.major = MAJOR(devt);
	c.minor = MINOR(devt);
	if (copy_to_user(uarg, &c, sizeof(c)))
		return -EFAULT;	/* the proxy stays until the control file is closed */
	return 0;
}

static long kb_ctl_mmap_query(struct kb_ctl *ctl, struct kfd_bridge_mmap_query __user *uarg)
{
	struct kfd_bridge_mmap_query mq;
	struct kb_query *q;

	if (copy_from_user(&mq, uarg, sizeof(mq)))
		return -EFAULT;
	mutex_lock(&ctl->lock);
	q = mq.id <= UINT_MAX ? xa_load(&ctl->queries, mq.id) : NULL;
	if (q) {
		mq.offset = q->offset;
		mq.length = q->length;
		mq.flags = q->flags;
		mq.tid = q->tid;
	}
	mutex_unlock(&ctl->lock);
	if (!q)
		return -ENOENT;
	return copy_to_user(uarg, &mq, sizeof(mq)) ? -EFAULT : 0;
}

static long kb_ctl_mmap_answer(struct kb_ctl *ctl, struct kfd_bridge_mmap_answer __user *uarg)
{
	struct kfd_bridge_mmap_answer a;
	struct kb_query *q;
	struct file *f;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (!PAGE_ALIGNED(a.offset))
		return -EINVAL;
	f = fget(a.fd);
	if (!f)
		return -EBADF;
	if (!shmem_file(f)) {
		fput(f);
		return -EINVAL;
	}
	mutex_lock(&ctl->lock);
	q = a.id <= UINT_MAX ? xa_load(&ctl->queries, a.id) : NULL;
	if (q) {
		swap(q->memfd, f);	/* an earlier answer to the same query is dropped */
		q->memfd_offset = a.offset;
		q->vma_flags = a.flags;
	}
	mutex_unlock(&ctl->lock);
	if (f)
		fput(f);
	return q ? 0 : -ENOENT;
}

static long kb_ctl_push_fds(struct kb_ctl *ctl, struct kfd_bridge_push_fds __user *uarg)
{
	struct kfd_bridge_push_fds pf;
	struct kfd_bridge_fd __user *ufds;
	struct kb_pending *p, *tmp;
	LIST_HEAD(list);
	LIST_HEAD(gone);
	struct pid *pid;
	long err = 0;
	u32 i;

	if (copy_from_user(&pf, uarg, sizeof(pf)))
		return -EFAULT;
	if (!pf.count)
		return 0;
	if (pf.count > KB_MAX_PENDING_FDS)
		return -EINVAL;
	pid = find_get_pid(pf.tid);
	if (!pid)
		return -ESRCH;
	ufds = u64_to_user_ptr(pf.fds);
	for (i = 0; i < pf.count; i++) {
		struct kfd_bridge_fd e;

		if (copy_from_user(&e, &ufds[i], sizeof(e))) {
			err = -EFAULT;
			break;
		}
		if (e.flags & ~O_CLOEXEC) {
			err = -EINVAL;
			break;
		}
		p = kzalloc(sizeof(*p), GFP_KERNEL);
		if (!p) {
			err = -ENOMEM;
			break;
		}
		p->fd = -1;
		p->pid = get_pid(pid);
		p->flags = e.flags;
		p->addr = e.addr;
		list_add_tail(&p->node, &list);
		p->file = fget(e.fd);
		if (!p->file) {
			err = -EBADF;
			break;
		}
	}
	mutex_lock(&ctl->lock);
	/* Fds for threads that died before they collected them. */
	rcu_read_lock();
	list_for_each_entry_safe(p, tmp, &ctl->pending, node) {
		if (!pid_task(p->pid, PIDTYPE_PID)) {
			list_move_tail(&p->node, &gone);
			ctl->npending--;
		}
	}
	rcu_read_unlock();
	if (!err && ctl->npending + pf.count > KB_MAX_PENDING_FDS)
		err = -ENOSPC;
	if (!err) {
		list_splice_tail_init(&list, &ctl->pending);
		ctl->npending += pf.count;
	}
	mutex_unlock(&ctl->lock);
	kb_pending_free_list(&gone);
	kb_pending_free_list(&list);
	put_pid(pid);
	return err;
}

static long kb_ctl_open_access(struct kb_ctl *ctl, struct kfd_bridge_open_access __user *uarg)
{
	struct kfd_bridge_open_access oa;
	struct kb_open_rec *rec;
	long err = -ENOENT;

	if (copy_from_user(&oa, uarg, sizeof(oa)))
		return -EFAULT;
	mutex_lock(&ctl->lock);
	list_for_each_entry(rec, &ctl->opens, node) {
		if (rec->tid != oa.tid)
			continue;
		err = 0;
		if (copy_to_user(u64_to_user_ptr(oa.devs), rec->devs,
				 min(oa.count, rec->count) * sizeof(*rec->devs)))
			err = -EFAULT;
		oa.count = rec->count;
		break;
	}
	mutex_unlock(&ctl->lock);
	if (err)
		return err;
	return copy_to_user(uarg, &oa, sizeof(oa)) ? -EFAULT : 0;
}

static long kb_ctl_take_unmaps(struct kb_ctl *ctl, struct kfd_bridge_take_unmaps __user *uarg)
{
	struct kfd_bridge_take_unmaps tu;
	struct kfd_bridge_unmap *buf;
	unsigned int room, n = 0;
	struct kb_mm *m;
	bool released = false;
	long err = -ENOENT;

	if (copy_from_user(&tu, uarg, sizeof(tu)))
		return -EFAULT;
	room = min(tu.count, KB_MAX_UNMAPS);
	buf = kmalloc_array(max(room, 1u), sizeof(*buf), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	tu.flags = 0;
	mutex_lock(&ctl->lock);
	list_for_each_entry(m, &ctl->mms, node) {
		if (pid_nr_ns(m->tgid, ctl->pid_ns) != tu.tgid)
			continue;
		spin_lock(&m->lock);
		if (m->gone) {
			/* Torn down: exited, or left by execve (a live mm of the process wins). */
			spin_unlock(&m->lock);
			released = true;
			continue;
		}
		n = min(room, m->count);
		memcpy(buf, m->unmaps, n * sizeof(*buf));
		m->count -= n;
		memmove(m->unmaps, m->unmaps + n, m->count * sizeof(*buf));
		if (m->lost)
			tu.flags |= KFD_BRIDGE_UNMAPS_LOST;
		/* A look (no room) leaves the flag for the take that follows. */
		if (room)
			m->lost = false;
		if (m->count)
			tu.flags |= KFD_BRIDGE_UNMAPS_MORE;
		spin_unlock(&m->lock);
		released = false;
		err = 0;
		break;
	}
	if (err && !released) {
		unsigned int i;

		for (i = 0; i < KB_MAX_RELEASED; i++)
			if (ctl->released[i] && pid_nr_ns(ctl->released[i], ctl->pid_ns) == tu.tgid)
				released = true;
	}
	mutex_unlock(&ctl->lock);
	if (err && released) {
		tu.flags = KFD_BRIDGE_UNMAPS_RELEASED;
		err = 0;
	}
	/* Taken is taken: a daemon that gives a bad address loses them (EFAULT). */
	if (!err && copy_to_user(u64_to_user_ptr(tu.ranges), buf, n * sizeof(*buf)))
		err = -EFAULT;
	kfree(buf);
	if (err)
		return err;
	tu.count = n;
	return copy_to_user(uarg, &tu, sizeof(tu)) ? -EFAULT : 0;
}

static long kb_ctl_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct kb_ctl *ctl = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case KFD_BRIDGE_IOC_VERSION:
		return put_user((u32)KFD_BRIDGE_VERSION, (u32 __user *)uarg);
	case KFD_BRIDGE_IOC_CREATE:
		return kb_ctl_create(ctl, uarg);
	case KFD_BRIDGE_IOC_MMAP_QUERY:
		return kb_ctl_mmap_query(ctl, uarg);
	case KFD_BRIDGE_IOC_OPEN_ACCESS:
		return kb_ctl_open_access(ctl, uarg);
	case KFD_BRIDGE_IOC_MMAP_ANSWER:
		return kb_ctl_mmap_answer(ctl, uarg);
	case KFD_BRIDGE_IOC_PUSH_FDS:
		return kb_ctl_push_fds(ctl, uarg);
	case KFD_BRIDGE_IOC_TAKE_UNMAPS:
		return kb_ctl_take_unmaps(ctl, uarg);
	default:
		return -ENOTTY;
	}
}

static int kb_ctl_open(struct inode *inode, struct file *file)
{
	struct kb_ctl *ctl;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	ctl = kzalloc(sizeof(*ctl), GFP_KERNEL);
	if (!ctl)
		return -ENOMEM;
	kref_init(&ctl->ref);
	ctl->pid_ns = get_pid_ns(task_active_pid_ns(current));
	mutex_init(&ctl->lock);
	INIT_LIST_HEAD(&ctl->devs);
	INIT_LIST_HEAD(&ctl->pending);
	INIT_LIST_HEAD(&ctl->opens);
	INIT_LIST_HEAD(&ctl->mms);
	xa_init_flags(&ctl->queries, XA_FLAGS_ALLOC1);
	file->private_data = ctl;
	return 0;
}

/*
 * The daemon is gone (or closed the control file): its proxies go away, undelivered fds are
 * closed. Nothing here waits for the daemon, which may be exiting with its CUSE files still
 * open; mmaps in flight find the control dead or get their answer from CUSE (an error).
 */
static int kb_ctl_release(struct inode *inode, struct file *file)
{
	struct kb_ctl *ctl = file->private_data;
	struct kb_dev *kd, *tmp;
	LIST_HEAD(devs);
	LIST_HEAD(pending);

	mutex_lock(&ctl->lock);
	ctl->dead = true;
	list_splice_init(&ctl->devs, &devs);
	list_splice_init(&ctl->pending, &pending);
	ctl->npending = 0;
	mutex_unlock(&ctl->lock);
	list_for_each_entry_safe(kd, tmp, &devs, node) {
		list_del(&kd->node);
		kb_dev_remove(kd);
	}
	kb_pending_free_list(&pending);
	kref_put(&ctl->ref, kb_ctl_free);
	return 0;
}

static const struct file_operations kb_ctl_fops = {
	.owner = THIS_MODULE,
	.open = kb_ctl_open,
	.release = kb_ctl_release,
	.unlocked_ioctl = kb_ctl_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice kb_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "kfd-bridge",
	.fops = &kb_ctl_fops,
	.mode = 0600,
};

static int __init kb_init(void)
{
	int err;

	kb_class = kb_class_create("kfd_bridge");
	if (IS_ERR(kb_class))
		return PTR_ERR(kb_class);
	err = misc_register(&kb_misc);
	if (err) {
		class_destroy(kb_class);
		return err;
	}
	return 0;
}

static void __exit kb_exit(void)
{
	misc_deregister(&kb_misc);
	class_destroy(kb_class);
}

module_init(kb_init);
module_exit(kb_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Proxy devices that give CUSE devices mmap and fd installation (kfd-simd)");
