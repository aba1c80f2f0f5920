// Reference oracle for the differential test in `quartz_differential.rs`.
//
// Reads cases from stdin, one per line, tab-separated:
//     id <TAB> expression (tab written as backslash-t, backslash as two) <TAB> zone <TAB> start (epoch milliseconds) <TAB> count
// and writes one line per case to stdout:
//     id <TAB> OK <TAB> comma-separated epoch milliseconds of the next `count` fire times
//     id <TAB> ERR <TAB> parse error message
//     id <TAB> TIMEOUT
// A count of 0 only checks that the expression parses. Every evaluation runs with a time limit so
// that an expression that makes the reference loop forever is reported instead of hanging the run.

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.Date;
import java.util.TimeZone;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.quartz.CronExpression;

public class QuartzOracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        ExecutorService pool = newPool();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            String id = f[0];
            String expr = unescape(f[1]);
            String zone = f[2];
            long start = Long.parseLong(f[3]);
            int count = Integer.parseInt(f[4]);
            Future<String> job = pool.submit(() -> evaluate(expr, zone, start, count));
            String result;
            try {
                result = job.get(2, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                job.cancel(true);
                pool.shutdownNow();
                pool = newPool();
                result = "TIMEOUT";
            }
            out.write(id);
            out.write('\t');
            out.write(result);
            out.write('\n');
        }
        out.flush();
        System.exit(0);
    }

    /** Undoes the escaping of the expression column: backslash-t is a tab, backslash-backslash a backslash. */
    private static String unescape(String s) {
        StringBuilder sb = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\\' && i + 1 < s.length()) {
                char n = s.charAt(++i);
                sb.append(n == 't' ? '\t' : n);
            } else {
                sb.append(c);
            }
        }
        return sb.toString();
    }

    private static ExecutorService newPool() {
        return Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r);
            t.setDaemon(true);
            return t;
        });
    }

    private static String evaluate(String expr, String zone, long start, int count) {
        CronExpression cron;
        try {
            cron = new CronExpression(expr);
        } catch (Exception e) {
            return "ERR\t" + String.valueOf(e.getMessage()).replace('\t', ' ').replace('\n', ' ');
        }
        cron.setTimeZone(TimeZone.getTimeZone(zone));
        StringBuilder sb = new StringBuilder("OK\t");
        Date at = new Date(start);
        try {
            for (int i = 0; i < count; i++) {
                Date next = cron.getTimeAfter(at);
                if (next == null) {
                    break;
                }
                if (i > 0) {
                    sb.append(',');
                }
                sb.append(next.getTime());
                at = next;
            }
        } catch (Exception e) {
            return "EXC\t" + e.getClass().getName() + ": " + String.valueOf(e.getMessage()).replace('\t', ' ');
        }
        return sb.toString();
    }
}
