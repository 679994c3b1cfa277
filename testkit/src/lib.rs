//! Test support for aicli: fake model APIs on loopback (in progress).
