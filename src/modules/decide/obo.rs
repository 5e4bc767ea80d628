//! OBO 1.4 reader (placeholder).
