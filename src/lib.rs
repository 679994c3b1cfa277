//! aicli engine (in progress).
