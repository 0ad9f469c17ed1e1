//! SCSI logical-unit logic (sans-I/O): what Linux sends to bring a disk up and use it.
