//! Heap tuples, varlena values and TOAST.
