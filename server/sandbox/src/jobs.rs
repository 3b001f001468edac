//! The background commands of one session's sandbox, as the server keeps them: each job's
//! status and its output not yet read, bounded, and the ends not yet told to the model.
//!
//! Why here, in the manager, rather than in the agent: the output is already streamed to the
//! server as it comes ([`outboard_sandbox_init::protocol::FromAgent::Output`]), so reading it (`BashOutput`)
//! never wakes or thaws the sandbox, and a job that ended is still readable after the sandbox
//! froze or stopped. Its end arrives unsolicited from the agent, so the server waits for it
//! without polling.

use std::collections::VecDeque;

use outboard_shared::TaskStatus;

/// Background jobs running at once in one sandbox: each holds two pipes and a reader task in the
/// agent and a buffer here; a model that needs more is starting jobs it never reads.
pub const MAX_RUNNING_JOBS: usize = 8;

/// Ended jobs kept for `BashOutput` after their end: the oldest is forgotten beyond this.
pub const MAX_ENDED_JOBS: usize = 32;

/// Bytes of unread output kept per job: what `BashOutput` can return at once is the tool
/// result's cap (30,000 bytes), and a job left alone should not grow memory; beyond it the
/// oldest unread output is dropped and the next read says how much.
pub const JOB_UNREAD_BYTES: usize = 64 * 1024;

/// Why a job is not running any more, or that it still is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Still running.
    Running,
    /// Exited by itself with this code.
    Exited(i32),
    /// Killed (by `KillShell`, a signal, or the sandbox's end).
    Killed,
    /// It was running when the server stopped or crashed (found in the log at the start).
    Lost,
}

impl JobState {
    /// The wire status.
    pub fn status(self) -> TaskStatus {
        match self {
            JobState::Running => TaskStatus::Running,
            JobState::Exited(_) => TaskStatus::Completed,
            JobState::Killed => TaskStatus::Killed,
            JobState::Lost => TaskStatus::Lost,
        }
    }

    /// The exit code, when it exited.
    pub fn exit_code(self) -> Option<i32> {
        match self {
            JobState::Exited(code) => Some(code),
            _ => None,
        }
    }
}

/// A job's start or end, for the session's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReport {
    /// The job's shell id (`bash_…`).
    pub shell_id: String,
    /// Its command.
    pub command: String,
    /// Where it stands now.
    pub state: JobState,
}

/// What `BashOutput` gets: the output since the last read and where the job stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRead {
    /// The job's command.
    pub command: String,
    /// Output not read before (stdout and stderr interleaved as they came).
    pub output: String,
    /// Bytes of unread output dropped because more than [`JOB_UNREAD_BYTES`] waited.
    pub dropped: usize,
    /// Where it stands.
    pub state: JobState,
}

#[derive(Debug)]
struct Job {
    shell_id: String,
    /// The agent's id for it (of the live instance).
    agent_id: u64,
    command: String,
    state: JobState,
    unread: VecDeque<String>,
    unread_bytes: usize,
    dropped: usize,
    /// Its end has been told to the model (a reminder) or read by it (`BashOutput`).
    told: bool,
}

/// The job table of one sandbox manager.
#[derive(Debug, Default)]
pub struct Jobs {
    jobs: Vec<Job>,
    /// Starts and ends not yet handed to the session's log: at most two per job.
    reports: Vec<JobReport>,
}

impl Jobs {
    /// How many are running.
    pub fn running(&self) -> usize {
        self.jobs.iter().filter(|j| j.state == JobState::Running).count()
    }

    /// Starts and ends since the last call, oldest first.
    pub fn take_reports(&mut self) -> Vec<JobReport> {
        std::mem::take(&mut self.reports)
    }

    /// A frame from the agent that belongs to a job; `false` when it is not one.
    pub fn frame(&mut self, frame: &outboard_sandbox_init::protocol::FromAgent) -> bool {
        use outboard_sandbox_init::protocol::FromAgent;
        match frame {
            FromAgent::Output { id, text, .. } => self.output(*id, text.clone()),
            FromAgent::JobDone { id, exit_code, .. } => {
                self.ended(*id, *exit_code);
                true
            }
            _ => false,
        }
    }

    /// Jobs the log shows running when the server stopped: known as lost, their end not told
    /// to the model yet, and not reported again (the session logged them).
    pub fn adopt_lost(&mut self, lost: Vec<(String, String)>) {
        for (shell_id, command) in lost {
            self.jobs.push(Job {
                shell_id,
                agent_id: 0,
                command,
                state: JobState::Lost,
                unread: VecDeque::new(),
                unread_bytes: 0,
                dropped: 0,
                told: false,
            });
        }
        self.forget_old();
    }

    /// Records a started job.
    pub fn add(&mut self, shell_id: String, agent_id: u64, command: String) {
        self.reports.push(JobReport {
            shell_id: shell_id.clone(),
            command: command.clone(),
            state: JobState::Running,
        });
        self.jobs.push(Job {
            shell_id,
            agent_id,
            command,
            state: JobState::Running,
            unread: VecDeque::new(),
            unread_bytes: 0,
            dropped: 0,
            told: false,
        });
    }

    /// The agent id of the running job `shell_id`.
    pub fn agent_id(&self, shell_id: &str) -> Option<u64> {
        self.jobs
            .iter()
            .find(|j| j.shell_id == shell_id && j.state == JobState::Running)
            .map(|j| j.agent_id)
    }

    /// Whether a job of that id is known (running or ended).
    pub fn knows(&self, shell_id: &str) -> bool {
        self.jobs.iter().any(|j| j.shell_id == shell_id)
    }

    /// Output of the job the agent calls `agent_id`; `false` if it is not a job.
    pub fn output(&mut self, agent_id: u64, text: String) -> bool {
        let Some(job) = self.jobs.iter_mut().find(|j| j.agent_id == agent_id) else {
            return false;
        };
        job.unread_bytes += text.len();
        job.unread.push_back(text);
        while job.unread_bytes > JOB_UNREAD_BYTES {
            let Some(front) = job.unread.front_mut() else { break };
            let excess = job.unread_bytes - JOB_UNREAD_BYTES;
            if front.len() <= excess {
                job.unread_bytes -= front.len();
                job.dropped += front.len();
                job.unread.pop_front();
            } else {
                let mut cut = excess;
                while !front.is_char_boundary(cut) {
                    cut += 1;
                }
                front.drain(..cut);
                job.unread_bytes -= cut;
                job.dropped += cut;
            }
        }
        true
    }

    /// The job the agent calls `agent_id` ended; its report for the log.
    pub fn ended(&mut self, agent_id: u64, exit_code: Option<i32>) -> Option<JobReport> {
        let job = self
            .jobs
            .iter_mut()
            .find(|j| j.agent_id == agent_id && j.state == JobState::Running)?;
        job.state = match exit_code {
            Some(code) => JobState::Exited(code),
            None => JobState::Killed,
        };
        let report = JobReport {
            shell_id: job.shell_id.clone(),
            command: job.command.clone(),
            state: job.state,
        };
        self.reports.push(report.clone());
        self.forget_old();
        Some(report)
    }

    /// Adds `line` to the unread output of every running job (why they are about to be killed,
    /// for `BashOutput`).
    pub fn note_running(&mut self, line: &str) {
        let running: Vec<u64> =
            self.jobs.iter().filter(|j| j.state == JobState::Running).map(|j| j.agent_id).collect();
        for agent_id in running {
            self.output(agent_id, format!("\n{line}\n"));
        }
    }

    /// The sandbox went away: every running job is killed with it; their reports.
    pub fn all_killed(&mut self) -> Vec<JobReport> {
        let mut reports = Vec::new();
        for job in self.jobs.iter_mut().filter(|j| j.state == JobState::Running) {
            job.state = JobState::Killed;
            reports.push(JobReport {
                shell_id: job.shell_id.clone(),
                command: job.command.clone(),
                state: job.state,
            });
        }
        self.reports.extend(reports.iter().cloned());
        self.forget_old();
        reports
    }

    /// What is new from `shell_id` since the last read; `None` for an unknown id. Reading an
    /// ended job counts as telling the model of its end.
    pub fn read(&mut self, shell_id: &str) -> Option<JobRead> {
        let job = self.jobs.iter_mut().find(|j| j.shell_id == shell_id)?;
        let output: String = job.unread.drain(..).collect();
        job.unread_bytes = 0;
        let dropped = std::mem::take(&mut job.dropped);
        if job.state != JobState::Running {
            job.told = true;
        }
        Some(JobRead { command: job.command.clone(), output, dropped, state: job.state })
    }

    /// Ended jobs the model has not heard of yet, marked as told.
    pub fn untold(&mut self) -> Vec<JobReport> {
        self.jobs
            .iter_mut()
            .filter(|j| j.state != JobState::Running && !j.told)
            .map(|j| {
                j.told = true;
                JobReport {
                    shell_id: j.shell_id.clone(),
                    command: j.command.clone(),
                    state: j.state,
                }
            })
            .collect()
    }

    /// Keeps at most [`MAX_ENDED_JOBS`] ended jobs, dropping the oldest.
    fn forget_old(&mut self) {
        let mut ended = self.jobs.iter().filter(|j| j.state != JobState::Running).count();
        self.jobs.retain(|j| {
            if ended > MAX_ENDED_JOBS && j.state != JobState::Running {
                ended -= 1;
                return false;
            }
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_output_stops_at_its_bound_and_the_next_read_says_how_much_was_dropped() {
        let mut jobs = Jobs::default();
        jobs.add("bash_a".into(), 7, "yes".into());
        let line = "é".repeat(1000) + "\n";
        let mut written = 0;
        while written <= 2 * JOB_UNREAD_BYTES {
            assert!(jobs.output(7, line.clone()));
            written += line.len();
        }
        let read = jobs.read("bash_a").unwrap();
        // Cut on a character boundary: up to 3 bytes under the bound, never over it.
        assert!((JOB_UNREAD_BYTES - 3..=JOB_UNREAD_BYTES).contains(&read.output.len()));
        assert!(read.output.ends_with("é\n"));
        assert_eq!(read.output.len() + read.dropped, written, "every byte is accounted for");
        assert_eq!(read.state, JobState::Running);
        // Only what is new since the last read.
        assert!(jobs.output(7, "next\n".into()));
        let again = jobs.read("bash_a").unwrap();
        assert_eq!((again.output.as_str(), again.dropped), ("next\n", 0));
    }

    #[test]
    fn an_end_is_told_once_and_old_ends_are_forgotten() {
        let mut jobs = Jobs::default();
        for n in 0..(MAX_ENDED_JOBS as u64 + 3) {
            jobs.add(format!("bash_{n}"), n, "true".into());
            assert!(jobs.ended(n, Some(0)).is_some());
        }
        assert_eq!(jobs.jobs.len(), MAX_ENDED_JOBS);
        assert!(!jobs.knows("bash_0"));
        assert_eq!(jobs.untold().len(), MAX_ENDED_JOBS);
        assert!(jobs.untold().is_empty());
        jobs.add("bash_k".into(), 100, "sleep 9".into());
        assert_eq!(jobs.running(), 1);
        let killed = jobs.all_killed();
        assert_eq!(killed.len(), 1);
        assert_eq!(killed[0].state, JobState::Killed);
    }
}
