# Plot of the consumer workload (gnuplot; data from consumers.pl report).
#   gnuplot -e "dir='RESULTS_DIR'; load='max'; sub='LOAD'; title='MACHINE'; nsys=N" consumers.gp
# Writes dir/consumers_<load>.png from dir/consumers_<load>.dat: by second
# of each system's run, the rows its producers wrote (columns 2..nsys+1),
# the updates its consumers stored, summed over the consumers (the next
# nsys columns), and the median end-to-end latency of the calls made in
# that second (the last nsys).
if (!exists("title")) title = ''
if (!exists("sub")) sub = ''
dat = dir."/consumers_".load.".dat"
set terminal pngcairo size 1100,1000 noenhanced
set datafile separator "\t"
set datafile missing "NaN"
set output dir."/consumers_".load.".png"
set multiplot layout 3,1 title "consumer workload: 8 producers, 4 consumers of one queue, each storing every row\n".sub."\n".title
set key outside right top
set grid
set lmargin 12		# the same margins in every panel, so the time axes align
set rmargin 44
set xlabel "seconds into the run"
set format y "%.1s%c"
set yrange [0:*]

set title "producers: rows/s"
set ylabel "rows/s"
plot for [i=2:nsys+1] dat using 1:i with lines lw 1.5 title columnheader(i)

set title "consumers: updates stored/s (sum of 4)"
set ylabel "updates/s"
plot for [i=nsys+2:2*nsys+1] dat using 1:i with lines lw 1.5 title columnheader(i)

set title "end-to-end latency, median of the calls made in each second"
set ylabel "ms"
set logscale y
set yrange [*:*]
set format y "%.0f"
plot for [i=2*nsys+2:3*nsys+1] dat using 1:i with lines lw 1.5 title columnheader(i)
unset multiplot
