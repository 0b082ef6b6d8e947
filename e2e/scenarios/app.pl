#!/usr/bin/perl
# app.pl -- the application of the restart and upgrade scenarios (05, 10),
# run in the app pods (perl-base only: the app image is debian:12-slim).
#
#   perl app.pl append FILE   hold FILE open (O_APPEND); every 50 ms append one
#                             record, fsync it through the same descriptor and
#                             read the whole file back through it, checking every
#                             record acknowledged so far
#   perl app.pl list DIR      every 50 ms list DIR and read every file in it
#
# An iteration that fails (any call, or a record missing or wrong) is an error:
# one line "error T what" (T: CLOCK_REALTIME seconds).  After an error the append
# mode closes and reopens FILE, and checks that every acknowledged record is still
# there ("LOST" in the line if not).  Once a second it prints
#
#   tick T ok=N errors=E gap_ms=G
#
# N: good iterations so far, E: errors so far, G: the longest time between two
# consecutive good iterations that ended in this second (the stall an event
# caused, plus the normal cost of one iteration).  A scenario takes the largest
# G of the ticks in an event's time window.
use strict;
use warnings;
use Fcntl qw(O_RDWR O_CREAT O_APPEND O_RDONLY SEEK_SET);
use IO::Handle;

$| = 1;
my ($mode, $path) = @ARGV;
die "usage: app.pl append FILE | list DIR\n" unless $mode && $path && $mode =~ /^(append|list)$/;

# CLOCK_REALTIME with nanoseconds through clock_gettime (x86_64: 228, aarch64:
# 113); whole seconds where the call is not available
my $arch = `uname -m`;
chomp $arch;
my $nr = { x86_64 => 228, aarch64 => 113 }->{$arch} // -1;
sub now {
    if ($nr >= 0) {
        my $ts = pack('q q', 0, 0);
        return do { my ($s, $n) = unpack('q q', $ts); $s + $n / 1e9 } if syscall($nr, 0, $ts) == 0;
    }
    return time();
}

my ($fh, $expect, $i) = (undef, '', 0);

sub read_all {
    my ($h) = @_;
    sysseek($h, 0, SEEK_SET) or die "seek: $!\n";
    my $buf = '';
    while (1) {
        my $n = sysread($h, $buf, 1 << 20, length $buf);
        die "read: $!\n" unless defined $n;
        last if $n == 0;
    }
    return $buf;
}

sub reopen {
    close($fh) if $fh;
    undef $fh;
    sysopen($fh, $path, O_RDWR | O_CREAT | O_APPEND, 0644) or do { undef $fh; die "open: $!\n" };
    my $have = read_all($fh);
    if (substr($have, 0, length $expect) ne $expect) {
        my $msg = sprintf("LOST acknowledged records: file has %d bytes, %d acknowledged",
                          length $have, length $expect);
        $expect = $have;
        die "$msg\n";
    }
    $expect = $have;   # a record written but not acknowledged may be there
}

sub iteration {
    if ($mode eq 'append') {
        reopen() unless $fh;
        my $rec = sprintf("rec %08d %.3f\n", $i, now());
        my $w = syswrite($fh, $rec);
        die "write: $!\n" unless defined $w;
        die "short write $w\n" unless $w == length $rec;
        $fh->sync or die "fsync: $!\n";
        my $have = read_all($fh);
        die sprintf("read back %d bytes, want %d\n", length $have, length($expect) + length $rec)
            unless $have eq $expect . $rec;
        $expect .= $rec;
        $i++;
    } else {
        opendir(my $d, $path) or die "opendir: $!\n";
        my @names = grep { !/^\.\.?$/ } readdir($d);
        closedir($d);
        for my $n (@names) {
            sysopen(my $h, "$path/$n", O_RDONLY) or die "open $n: $!\n";
            my $buf;
            while (1) {
                my $r = sysread($h, $buf, 1 << 20);
                die "read $n: $!\n" unless defined $r;
                last if $r == 0;
            }
            close($h);
        }
    }
}

my ($ok, $errors, $gap, $last_ok) = (0, 0, 0, now());
my $tick = int(now());
while (1) {
    my $t0 = now();
    if (eval { iteration(); 1 }) {
        my $t = now();
        my $g = $t - $last_ok;
        $gap = $g if $g > $gap;
        $last_ok = $t;
        $ok++;
    } else {
        my $e = $@;
        chomp $e;
        $errors++;
        printf("error %.3f %s\n", now(), $e);
        if ($mode eq 'append') {
            close($fh) if $fh;
            undef $fh;
        }
    }
    my $t = now();
    if (int($t) != $tick) {
        # a stall still going on counts too (no good iteration since $last_ok)
        my $g = $t - $last_ok > $gap ? $t - $last_ok : $gap;
        printf("tick %.3f ok=%d errors=%d gap_ms=%d\n", $t, $ok, $errors, $g * 1000);
        ($tick, $gap) = (int($t), 0);
    }
    my $rest = 0.05 - ($t - $t0);
    select(undef, undef, undef, $rest) if $rest > 0;
}
