//! The thread-pool engine, for where io_uring is unavailable.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;

use super::super::{BdevChannel, BdevIo};
use super::{AioFile, execute_sync};
use crate::reactor::sys::EventFd;

/// I/O threads per bdev.
const THREADS: usize = 2;
/// Most I/Os one channel keeps in flight.
const CHANNEL_DEPTH: usize = 256;

struct Reply {
    done: ArrayQueue<Box<BdevIo>>,
    efd: EventFd,
}

struct Job {
    io: Box<BdevIo>,
    reply: Arc<Reply>,
}

pub(super) struct ThreadPool {
    jobs: Mutex<Option<SyncSender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl ThreadPool {
    pub(super) fn new(name: &str, file: Arc<AioFile>) -> std::io::Result<Arc<Self>> {
        let (tx, rx) = sync_channel::<Job>(CHANNEL_DEPTH * 4);
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for i in 0..THREADS {
            let rx: Arc<Mutex<Receiver<Job>>> = Arc::clone(&rx);
            let file = Arc::clone(&file);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("aio_{name}_{i}"))
                    .spawn(move || {
                        loop {
                            let job = rx.lock().recv();
                            let Ok(Job { mut io, reply }) = job else {
                                break;
                            };
                            io.status = execute_sync(&file, &mut io);
                            if reply.done.push(io).is_err() {
                                tracing::error!("aio reply queue overflow");
                            }
                            reply.efd.notify();
                        }
                    })?,
            );
        }
        Ok(Arc::new(Self {
            jobs: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
        }))
    }

    pub(super) fn shutdown(&self) {
        self.jobs.lock().take();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

pub(super) struct PoolChannel {
    pool: Arc<ThreadPool>,
    reply: Arc<Reply>,
    inflight: usize,
}

impl PoolChannel {
    pub(super) fn new(pool: Arc<ThreadPool>) -> std::io::Result<Self> {
        Ok(Self {
            pool,
            reply: Arc::new(Reply {
                done: ArrayQueue::new(CHANNEL_DEPTH),
                efd: EventFd::new()?,
            }),
            inflight: 0,
        })
    }
}

impl BdevChannel for PoolChannel {
    fn submit(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        if self.inflight >= CHANNEL_DEPTH {
            return Err(io);
        }
        let guard = self.pool.jobs.lock();
        let Some(tx) = guard.as_ref() else {
            return Err(io);
        };
        match tx.try_send(Job {
            io,
            reply: Arc::clone(&self.reply),
        }) {
            Ok(()) => {
                self.inflight += 1;
                Ok(())
            }
            Err(TrySendError::Full(j) | TrySendError::Disconnected(j)) => Err(j.io),
        }
    }

    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        let mut n = 0;
        while let Some(io) = self.reply.done.pop() {
            self.inflight -= 1;
            done(io);
            n += 1;
        }
        n
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.reply.efd.as_raw_fd())
    }

    fn arm(&mut self) -> bool {
        self.reply.efd.drain();
        !self.reply.done.is_empty()
    }

    fn outstanding(&self) -> usize {
        self.inflight
    }
}
