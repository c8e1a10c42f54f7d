// A fencecheck stdio client (docs/client-protocol.md) over Quartz's clustered scheduler
// (org.quartz-scheduler:quartz, JobStoreTX on the postgres-advisory backend's PostgreSQL), for
// the `cron` workload. Each worker's program is one scheduler instance of one cluster; one job,
// @DisallowConcurrentExecution, fired by one SimpleTrigger every `interval_ms`. Quartz decides
// which instance executes which firing; the protocol maps onto that:
//   acquire  waits (up to timeout_ms) for this instance to execute a firing: ok, token null,
//            evidence {"job": n, "recovering": bool}, n the firing's index (its scheduled time
//            after the trigger's start, in intervals; a recovery firing names the firing it
//            re-executes); no firing in time: fail "no-firing". The worker executes job n (its
//            write of job:<n>) while the Quartz job thread waits in execute();
//   renew    fail "not-renewable" (a firing has no lease to extend);
//   release  the job's execute() returns: the execution is over.
// Client options (FENCECHECK_OPTIONS): check_in_ms (org.quartz.jobStore.clusterCheckinInterval,
// default 7500, Quartz's), misfire_threshold_ms (org.quartz.jobStore.misfireThreshold, default
// 60000), misfire (the trigger's misfire instruction: smart (default), ignore, fire-now,
// now-with-existing-count, now-with-remaining-count, next-with-existing-count,
// next-with-remaining-count), interval_ms (default 1000), requests_recovery (the job's
// requestRecovery, default true: a firing in progress on an instance the cluster declares failed
// is executed again elsewhere), idle_wait_ms (org.quartz.scheduler.idleWaitTime, default 1000,
// so that every instance polls for triggers; Quartz's default is 30000), acquire_within_lock
// (org.quartz.jobStore.acquireTriggersWithinLock, default false, Quartz's).
// The program creates Quartz's tables from the script in its jar (tables_postgres.sql) if they
// are not there (../pg-schema/PgSchema.java), and schedules the job unless another instance did.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.TimeUnit;
import org.quartz.DisallowConcurrentExecution;
import org.quartz.Job;
import org.quartz.JobBuilder;
import org.quartz.JobDataMap;
import org.quartz.JobDetail;
import org.quartz.JobExecutionContext;
import org.quartz.ObjectAlreadyExistsException;
import org.quartz.Scheduler;
import org.quartz.SimpleScheduleBuilder;
import org.quartz.Trigger;
import org.quartz.TriggerBuilder;
import org.quartz.impl.StdSchedulerFactory;

public final class QuartzClient {
    // A firing the job thread hands to the request loop; it waits until the worker releases it.
    static final class Firing {
        final long job;
        final boolean recovering;
        final long firedNanos = System.nanoTime();
        final CountDownLatch released = new CountDownLatch(1);

        Firing(long job, boolean recovering) {
            this.job = job;
            this.recovering = recovering;
        }
    }

    static final SynchronousQueue<Firing> FIRINGS = new SynchronousQueue<>();
    // How long a firing waits for an acquire to take it (the worker asks again right after each
    // section or failed acquire); not taken, the execution is skipped, and logged.
    static final long HANDOFF_S = 10;
    static final String JOB = "fencecheck-job";

    /** The job: hands its firing to the request loop and returns when the worker released it. */
    @DisallowConcurrentExecution
    public static final class FencecheckJob implements Job {
        @Override
        public void execute(JobExecutionContext ctx) {
            JobDataMap data = ctx.getMergedJobDataMap();
            // A recovery firing is scheduled at the time of the firing it executes again (the
            // recovery trigger's start; JobStoreSupport.clusterRecover): the same n.
            long scheduled = ctx.getScheduledFireTime().getTime();
            String original = Scheduler.FAILED_JOB_ORIGINAL_TRIGGER_SCHEDULED_FIRETIME_IN_MILLISECONDS;
            if (ctx.isRecovering() && data.containsKey(original)) {
                scheduled = Long.parseLong(data.getString(original));
            }
            long n = Math.floorDiv(scheduled - data.getLong("epoch_ms"), data.getLong("interval_ms"));
            Firing f = new Firing(n, ctx.isRecovering());
            try {
                if (!FIRINGS.offer(f, HANDOFF_S, TimeUnit.SECONDS)) {
                    System.err.println("quartz-client: no acquire took job " + n + ": skipped");
                    return;
                }
                f.released.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private final Map<String, Firing> held = new HashMap<>();

    private QuartzClient() {}

    private ObjectNode handle(JsonNode req, long start) throws InterruptedException {
        String op = req.get("op").asText();
        String lock = req.path("lock").asText();
        switch (op) {
            case "acquire": {
                Firing f = FIRINGS.poll(Math.max(0, req.get("timeout_ms").asLong() - 100),
                    TimeUnit.MILLISECONDS);
                if (f == null) {
                    return Stdio.failed("fail", "no-firing");
                }
                held.put(lock, f);
                ObjectNode r = Stdio.reply("ok").putNull("token")
                    .put("attempt_ns", Math.max(0, f.firedNanos - start));
                r.putObject("evidence").put("job", f.job).put("recovering", f.recovering);
                return r;
            }
            case "renew":
                return Stdio.failed("fail", held.containsKey(lock) ? "not-renewable" : "not-held");
            case "release": {
                Firing f = held.remove(lock);
                if (f == null) {
                    return Stdio.failed("fail", "not-held");
                }
                f.released.countDown();
                return Stdio.reply("ok");
            }
            case "close":
                System.exit(0);
                return null;
            default:
                return Stdio.failed("fail", "unknown op " + op);
        }
    }

    private static Properties properties(JsonNode opts, String url, String instance) {
        Properties p = new Properties();
        p.setProperty("org.quartz.scheduler.instanceName", "fencecheck");
        p.setProperty("org.quartz.scheduler.instanceId", instance);
        p.setProperty("org.quartz.scheduler.skipUpdateCheck", "true");
        p.setProperty("org.quartz.scheduler.idleWaitTime", opts.path("idle_wait_ms").asText("1000"));
        p.setProperty("org.quartz.threadPool.class", "org.quartz.simpl.SimpleThreadPool");
        p.setProperty("org.quartz.threadPool.threadCount", "2");
        p.setProperty("org.quartz.jobStore.class", "org.quartz.impl.jdbcjobstore.JobStoreTX");
        p.setProperty("org.quartz.jobStore.driverDelegateClass",
            "org.quartz.impl.jdbcjobstore.PostgreSQLDelegate");
        p.setProperty("org.quartz.jobStore.dataSource", "pg");
        p.setProperty("org.quartz.jobStore.isClustered", "true");
        p.setProperty("org.quartz.jobStore.clusterCheckinInterval", opts.path("check_in_ms").asText("7500"));
        p.setProperty("org.quartz.jobStore.misfireThreshold",
            opts.path("misfire_threshold_ms").asText("60000"));
        p.setProperty("org.quartz.jobStore.acquireTriggersWithinLock",
            opts.path("acquire_within_lock").asText("false"));
        p.setProperty("org.quartz.dataSource.pg.driver", "org.postgresql.Driver");
        p.setProperty("org.quartz.dataSource.pg.URL", url);
        p.setProperty("org.quartz.dataSource.pg.user", PgSchema.user(opts));
        p.setProperty("org.quartz.dataSource.pg.password", "");
        p.setProperty("org.quartz.dataSource.pg.maxConnections", "4");
        p.setProperty("org.quartz.dataSource.pg.provider", "hikaricp");
        return p;
    }

    private static SimpleScheduleBuilder misfire(SimpleScheduleBuilder b, String how) {
        switch (how) {
            case "smart": return b;
            case "ignore": return b.withMisfireHandlingInstructionIgnoreMisfires();
            case "fire-now": return b.withMisfireHandlingInstructionFireNow();
            case "now-with-existing-count": return b.withMisfireHandlingInstructionNowWithExistingCount();
            case "now-with-remaining-count": return b.withMisfireHandlingInstructionNowWithRemainingCount();
            case "next-with-existing-count": return b.withMisfireHandlingInstructionNextWithExistingCount();
            case "next-with-remaining-count": return b.withMisfireHandlingInstructionNextWithRemainingCount();
            default: throw new IllegalArgumentException("misfire: " + how + " is not one of smart, "
                + "ignore, fire-now, now-with-existing-count, now-with-remaining-count, "
                + "next-with-existing-count, next-with-remaining-count");
        }
    }

    /** The job and its trigger, unless another instance scheduled them first. */
    private static void schedule(Scheduler scheduler, JsonNode opts) throws Exception {
        long interval = opts.path("interval_ms").asLong(1000);
        long epoch = (System.currentTimeMillis() / interval + 1) * interval;
        JobDetail job = JobBuilder.newJob(FencecheckJob.class).withIdentity(JOB)
            .requestRecovery(opts.path("requests_recovery").asBoolean(true))
            .usingJobData("epoch_ms", epoch).usingJobData("interval_ms", interval).build();
        SimpleScheduleBuilder every = SimpleScheduleBuilder.simpleSchedule()
            .withIntervalInMilliseconds(interval).repeatForever();
        Trigger trigger = TriggerBuilder.newTrigger().withIdentity(JOB).forJob(job)
            .startAt(new java.util.Date(epoch))
            .withSchedule(misfire(every, opts.path("misfire").asText("smart"))).build();
        try {
            scheduler.scheduleJob(job, trigger);
        } catch (ObjectAlreadyExistsException e) {
            // another instance of the cluster scheduled it
        }
    }

    public static void main(String[] args) throws Exception {
        // Quartz logs through SLF4J: its cluster manager's findings (failed instances, recoveries)
        // go to the worker's log.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.log.org.quartz.impl.jdbcjobstore", "info");
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        JsonNode opts = Stdio.options();
        String worker = System.getenv().getOrDefault("FENCECHECK_WORKER", "0");
        // As Quartz's AUTO instance ids (host name + start time): a restarted program is a new
        // instance, and the cluster recovers the old one.
        String instance = "fencecheck-w" + worker + "-" + System.currentTimeMillis();
        String url = PgSchema.url(opts, "quartz-w" + worker);
        PgSchema.ensure(url, PgSchema.user(opts), "qrtz_locks",
            "org/quartz/impl/jdbcjobstore/tables_postgres.sql");
        Scheduler scheduler = new StdSchedulerFactory(properties(opts, url, instance)).getScheduler();
        schedule(scheduler, opts);
        scheduler.start();
        Stdio.serve(new QuartzClient()::handle, Stdio.unknown("quartz-client"));
    }
}
