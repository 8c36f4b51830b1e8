//! KFD sysfs topology parsing and GPU remapping for checkpoint/restore.
