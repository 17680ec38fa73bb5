//! Test support: the size of the future an async fn returns, read from its
//! type without calling it. The futures that live as long as a socket, a
//! link or a document are held by the thousand, so their tests bound it.

/// A function of `Args` whose result's size can be read.
pub trait ReturnSize<Args> {
    /// Bytes of what the function returns: for an async fn, its future.
    fn return_size(&self) -> usize;
}

macro_rules! return_size {
    ($($arg:ident),*) => {
        impl<F, R, $($arg),*> ReturnSize<($($arg,)*)> for F
        where
            F: FnOnce($($arg),*) -> R,
        {
            fn return_size(&self) -> usize {
                std::mem::size_of::<R>()
            }
        }
    };
}

return_size!(A, B, C, D, E);
return_size!(A, B, C, D, E, G);
